"""A real A2A door in its own process, for the front's tests: mur's CapsuleService (queue + sleep) with
the bearer token of a file, answering `<name>: <text>` (after `--delay` seconds for a text starting
with "slow", so tasks are under way when the front switches). Prints one JSON line {"port", "pid"} once it serves.

    python tests/fleet/a2a_backend.py --name r1 --port N --token-file F [--delay S] [--tls-cert C --tls-key K]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mur.a2a.auth import DoorAuth  # noqa: E402
from mur.a2a.lifecycle import CapsuleService, TaskOutcome  # noqa: E402
from mur.manifest.capsule import Lifecycle  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--queue-depth", type=int, default=64)
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    args = p.parse_args()

    def executor(request, ctx):  # noqa: ANN001
        if request.text.startswith("slow"):
            time.sleep(args.delay)
        return TaskOutcome("completed", f"{args.name}: {request.text}", stats={"turns": 1})

    card = {"name": args.name, "version": "1.0.0", "capabilities": {"streaming": True}}
    auth = DoorAuth(token=Path(args.token_file).read_text().strip(),
                    tls_cert=Path(args.tls_cert) if args.tls_cert else None,
                    tls_key=Path(args.tls_key) if args.tls_key else None)
    service = CapsuleService(card=card, lifecycle=Lifecycle(task_acceptance="queue", after_task="sleep", queue_depth=args.queue_depth),
                             executor=executor, trace=lambda event: None, workdir=Path(tempfile.mkdtemp()),
                             port=args.port, idle_timeout=0, auth=auth, term_grace=30)
    service.start()
    print(json.dumps({"port": args.port, "pid": os.getpid()}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: service.shutdown())
    try:
        service.run()
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
