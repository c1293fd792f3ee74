"""The hello example end to end: built by mur.wasm.build, run through WasmHost.run_capsule with a
registry that dispatches `greet` to the tool component; and the compile cache across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mur.manifest.capsule import Limits
from mur.testing.toolregistry import ToolRegistry
from mur.wasm.build import build_guest_dir
from mur.wasm.env import guest_env
from mur.wasm.host import GuestConfig, WasmHost

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "hello"


@pytest.fixture(scope="module")
def hello() -> dict:
    capsule, _ = build_guest_dir(HELLO)
    greet, _ = build_guest_dir(HELLO / "greet")
    assert capsule == HELLO / "capsule.wasm" and greet == HELLO / "greet" / "greet.wasm"
    return {"capsule": capsule, "greet": greet}


def _run(hello, workdir: Path, host_env: dict, engine=None) -> list:
    host = WasmHost(engine=engine)
    limits = Limits(memory_bytes=256 * 1024 * 1024, deadline_seconds=60)
    env = guest_env(["HELLO_GREETING"], [], host_env, {"MURMUR_SESSION_ID": "ses_test"})
    calls = []
    registry = ToolRegistry(on_call=calls.append)
    greet = GuestConfig(hello["greet"], "greet", workdir, env, limits, [])
    registry.register("greet", lambda data: host.call_tool(greet, data))
    host.run_capsule(GuestConfig(hello["capsule"], "hello", workdir, env, limits, []), registry.invoke)
    return calls


def test_hello_writes_result_txt(hello, tmp_path):
    (tmp_path / "task.md").write_text("Ada\n")
    calls = _run(hello, tmp_path, {"HELLO_GREETING": "Bonjour", "ANTHROPIC_API_KEY": "sk-x"})
    assert (tmp_path / "out" / "result.txt").read_text() == "Bonjour, Ada!\n"
    assert [c.name for c in calls] == ["greet"] and calls[0].result.status == "passed"
    assert json.loads(calls[0].input.data) == {"name": "Ada"}


def test_hello_without_task_or_greeting(hello, tmp_path):
    _run(hello, tmp_path, {})
    assert (tmp_path / "out" / "result.txt").read_text() == "Hello, world!\n"


def test_second_build_is_a_no_op(hello):
    assert build_guest_dir(HELLO)[1] is False and build_guest_dir(HELLO / "greet")[1] is False


def test_second_process_loads_the_capsule_from_the_compile_cache(hello, tmp_path):
    script = (
        "import json, sys; from pathlib import Path; from mur.wasm.engine import WasmEngine;"
        "e = WasmEngine(cache_dir=Path(sys.argv[1])); e.component(Path(sys.argv[2])); print(json.dumps(e.stats))"
    )
    cache = tmp_path / "cache"
    stats = [json.loads(subprocess.run([sys.executable, "-c", script, str(cache), str(hello["capsule"])],
                                       check=True, capture_output=True, text=True).stdout) for _ in range(2)]
    assert stats[0]["compiled"] == 1
    assert stats[1] == {"compiled": 0, "disk_hits": 1, "memory_hits": 0}


def test_scripts_build_examples_is_idempotent(hello):
    def build() -> str:
        proc = subprocess.run([str(ROOT / "scripts" / "build-examples")], capture_output=True, text=True,
                              env={**os.environ, "PYTHON": sys.executable}, timeout=900)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    build()  # other examples may be new here; after this everything is in place
    second = build()
    assert "up to date: examples/hello/capsule.wasm" in second
    assert "up to date: examples/hello/greet/greet.wasm" in second
    assert "built:" not in second


# What a plain `mur run -t` of a capsule without inference must never import (issue 31: start-up is
# mostly imports): the A2A server stack, the model stack, deploy, the remote and Docker SDKs, OTel's
# exporter, syntax highlighting.
NOT_FOR_A_PLAIN_RUN = ("starlette", "uvicorn", "h11", "sse_starlette", "httpx", "paramiko", "docker",
                       "pygments", "opentelemetry", "mur.inference", "mur.a2a.server", "mur.deploy", "mur.fleet",
                       "mur.image", "mur.export")

_LOADED_AT_EXIT = (
    "import atexit, json, sys\n"
    "atexit.register(lambda: print('LOADED=' + json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
    "sys.argv = ['mur', 'run', '-t', 'Ada']\n"
    "from mur.cli.main import main\n"
    "main()\n"
)


def test_a_plain_run_loads_only_what_its_path_needs(hello, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MUR_", "OTEL_"))}
    # in-process (MUR_CAPSULE_HOST=off): a run from a script would be handed to the capsule host, whose
    # capsules import everything once for all (integration/session/test_run_imports.py has that case)
    proc = subprocess.run([sys.executable, "-c", _LOADED_AT_EXIT], cwd=HELLO, capture_output=True, text=True,
                          env={**env, "HOME": str(home), "MUR_CAPSULE_HOST": "off"}, timeout=600)
    assert proc.returncode == 0 and proc.stdout == "Hello, Ada!\n", proc.stderr
    loaded = json.loads(proc.stderr.rsplit("LOADED=", 1)[1])
    assert "mur.session.runner" in loaded and "wasmtime" in loaded  # it did run a session
    assert [m for m in loaded if m.startswith(NOT_FOR_A_PLAIN_RUN)] == []
