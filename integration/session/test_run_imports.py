"""What a plain `mur run --task` loads: only what its path needs (start-up is most of what a short run
costs). Through `mur.cli.main` in a fresh interpreter, on the real examples/hello capsule."""

from __future__ import annotations

import json
import subprocess
import sys

from session_support import mur_env

# Nothing of the A2A server (nobody calls this session: the listener never loads it), the inference
# stack (hello has no inference), the deploy stack, the OTel exporter (no endpoint), hooks (none),
# the shell sandbox (no shell), the CLI framework (the run parses without it), rich/pygments.
MUST_NOT_LOAD = (
    "starlette", "uvicorn", "h11", "asyncio", "httpx", "httpcore", "anyio", "opentelemetry", "google.protobuf",
    "typer", "click", "rich", "pygments", "docker", "paramiko",
    "mur.a2a.server", "mur.a2a.guard", "mur.inference", "mur.deploy", "mur.otel", "mur.hooks", "mur.image",
    "mur.provision", "mur.sandbox.shell",
)

PROBE = """
import json, sys, threading
from mur.cli.main import main
try:
    main(["run", "--task", "Ada"])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules),
                  "threads": sorted(t.name for t in threading.enumerate())}), file=sys.stderr)
"""


def test_a_plain_task_run_loads_only_what_its_path_needs(hello, home):
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=hello, env=mur_env(home), capture_output=True,
                          text=True, timeout=120)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["code"] == 0 and proc.stdout == "Hello, Ada!\n", proc.stderr
    loaded = report["modules"]
    offenders = [m for m in loaded if any(m == bad or m.startswith(bad + ".") for bad in MUST_NOT_LOAD)]
    assert offenders == []
    assert "mur.wasm.engine" in loaded and "mur.manifest.capsule" in loaded  # it did run the capsule
    assert "mur-a2a-door" not in report["threads"]  # no server started, so none to stop
