"""A process hosting a CapsuleService the way `mur run` does, for the SIGTERM tests.

usage: python sigterm_capsule.py MODE WORKDIR TERM_GRACE

MODE is what the executor does with a task:
  finishes     sleeps 1 s, ignoring cancellation, then completes
  cooperative  polls ctx.cancelled and fails early once it turns true
  stubborn     sleeps 60 s (must be interrupted after the grace period)
  input        waits in request-input

Prints one JSON line {"url": ...} once serving; writes trace.jsonl in WORKDIR (buffered, so only a
flush makes the lines appear), ending with a session_end line; exits 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from mur.a2a.lifecycle import CapsuleService, TaskOutcome
from mur.manifest.capsule import Lifecycle

mode, workdir, grace = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
trace_file = open(workdir / "trace.jsonl", "a", buffering=1 << 20)


def trace(event: dict) -> None:
    trace_file.write(json.dumps(event) + "\n")


def flush() -> None:
    trace_file.flush()
    os.fsync(trace_file.fileno())


def executor(request, ctx):
    if mode == "finishes":
        time.sleep(1.0)
        return TaskOutcome("completed", f"finished {request.text}")
    if mode == "cooperative":
        while not ctx.cancelled:
            time.sleep(0.02)
        return TaskOutcome("failed", "stopped early: the capsule is shutting down")
    if mode == "stubborn":
        time.sleep(60)
        return TaskOutcome("completed", "too late")
    return TaskOutcome("completed", ctx.request_input("anyone there?"))


service = CapsuleService(
    card={"name": "sigterm", "version": "0.0.1", "capabilities": {"streaming": True}},
    lifecycle=Lifecycle(task_acceptance="queue", after_task="sleep", queue_depth=4),
    executor=executor,
    trace=trace,
    trace_flush=flush,
    workdir=workdir,
    idle_timeout=0,
    term_grace=grace,
)
print(json.dumps({"url": service.start(), "pid": os.getpid()}), flush=True)
status = service.run()
service.stop()
trace({"event_type": "session_end", "exit_status": status})
flush()
sys.exit(0)
