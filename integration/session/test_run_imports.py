"""What a plain `mur run --task` loads: only what its path needs (start-up is most of what a short run
costs). Through `mur.cli.main` in a fresh interpreter, on the real examples/hello capsule."""

from __future__ import annotations

import json
import subprocess
import sys

from mur.testing.caphosts import stop_hosts
from session_support import mur_env

# Nothing of the A2A server (nobody calls this session: the listener never loads it), the inference
# stack (hello has no inference), the deploy stack, the OTel exporter (no endpoint), hooks (none),
# the shell sandbox (no shell), the CLI framework (the run parses without it), rich/pygments,
# importlib.metadata (email, zipfile, csv: nothing on the path reads distribution metadata).
MUST_NOT_LOAD = (
    "starlette", "uvicorn", "h11", "asyncio", "httpx", "httpcore", "anyio", "opentelemetry", "google.protobuf",
    "typer", "click", "rich", "pygments", "docker", "paramiko",
    "mur.a2a.server", "mur.a2a.http1", "mur.inference", "mur.deploy", "mur.otel", "mur.hooks", "mur.image",
    "mur.provision", "mur.sandbox.shell",
    "importlib.metadata",  # pydantic's plugin loader imports it; plugins are off (mur.cli.noplugins)
)

PROBE = """
import atexit, json, sys, threading
from mur.cli.main import main
def report():  # a `mur run` process ends with its atexit handlers, then os._exit (mur.cli.main._end_process)
    print(json.dumps({"modules": sorted(sys.modules),
                      "threads": sorted(t.name for t in threading.enumerate() if t.is_alive())}), file=sys.stderr)
atexit.register(report)
sys.argv = ["mur", "run", "--task", "Ada"]
main()  # as the console script calls it: this process's own `mur run`
"""


def probe(hello, home, **env: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=hello, env=mur_env(home, **env), capture_output=True,
                          text=True, timeout=120)
    return proc, json.loads(proc.stderr.strip().splitlines()[-1])


def test_a_plain_task_run_loads_only_what_its_path_needs(hello, home):
    proc, report = probe(hello, home, MUR_CAPSULE_HOST="off")  # in-process: the path itself
    assert proc.returncode == 0 and proc.stdout == "Hello, Ada!\n", proc.stderr
    loaded = report["modules"]
    offenders = [m for m in loaded if any(m == bad or m.startswith(bad + ".") for bad in MUST_NOT_LOAD)]
    assert offenders == []
    assert "mur.wasm.engine" in loaded and "mur.manifest.capsule" in loaded  # it did run the capsule
    assert "mur-a2a-door" not in report["threads"]  # no server started, so none to stop


def test_a_run_the_capsule_host_takes_loads_neither_the_models_nor_the_engine_itself(hello, home):
    try:
        proc, report = probe(hello, home, MUR_CAPSULE_HOST="on", MUR_CAPSULE_HOST_IDLE_SECS="10")  # handed over
        assert proc.returncode == 0 and proc.stdout == "Hello, Ada!\n", proc.stderr
        loaded = report["modules"]
        assert [m for m in ("pydantic", "yaml", "mur.manifest.capsule", "mur.wasm.engine", "wasmtime") if m in loaded] == []
    finally:
        stop_hosts(home)
