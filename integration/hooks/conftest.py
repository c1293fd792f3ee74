"""Fixtures for the hook integration tests: real hook components (built once, cached), real capsules.

* `probe_wasm` — the test hook (guests/probe_hook), whose behaviour comes from its artifact name;
* `debug_wasm` / `eval_wasm` — the first-party examples (examples/murmur-hook-*);
* `make_hook(name, wasm, **contract)` — a local-source hook artifact dir: the hook's own murmur.yaml
  (binding / execution_mode / commit_policy) beside a copy of the component;
* `hello_capsule` — a copy of the built examples/hello plain capsule, hooks appended to its manifest;
* `http_capsule` — a transport: http capsule (murmur-driver-anthropic + greet) against a loopback
  model server.
Builds go through mur.wasm.build's cache and compiled components through the wasmtime cache, so
only the first session on a machine pays the componentize-py cost.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GUESTS = Path(__file__).parent / "guests"
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(Path(__file__).parent))


def _build(src: Path, world: str) -> Path:
    from mur.wasm.build import build_component

    return build_component(src, world)


@pytest.fixture(scope="session")
def probe_wasm(componentize_py) -> Path:
    return _build(GUESTS / "probe_hook", "hook")


@pytest.fixture(scope="session")
def debug_wasm(componentize_py) -> Path:
    return _build(EXAMPLES / "murmur-hook-debug", "hook")


@pytest.fixture(scope="session")
def eval_wasm(componentize_py) -> Path:
    return _build(EXAMPLES / "murmur-hook-eval", "hook")


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("MURMUR_A2A_TIMEOUT_SECS", "1")
    for name in ("MURMUR_CASE_ID", "MURMUR_DATASET_ID", "MURMUR_FORMATION_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def make_hook(tmp_path):
    """make_hook(name, wasm, binding=, execution_mode=, commit_policy=) -> a local hook dir."""

    def make(name: str, wasm: Path, **contract: str) -> Path:
        dest = tmp_path / "hooks" / name
        dest.mkdir(parents=True)
        manifest = {"name": name, "version": "0.1.0", "runtime": "hook", **contract,
                    "requires_files": [f"{name}.wasm"]}
        (dest / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        try:
            os.link(wasm, dest / f"{name}.wasm")
        except OSError:
            shutil.copyfile(wasm, dest / f"{name}.wasm")
        return dest

    return make


@pytest.fixture
def hello_capsule(built_hello, tmp_path):
    """hello_capsule(hooks=[entry...], extra={top-level keys}) -> the manifest path."""

    made = []

    def make(hooks: list[dict], extra: dict | None = None) -> Path:
        made.append(1)
        dest = tmp_path / f"hello{len(made)}"
        shutil.copytree(built_hello, dest, ignore=shutil.ignore_patterns("workdir", "__pycache__", ".murmur"))
        manifest = yaml.safe_load((dest / "murmur.yaml").read_text())
        manifest["artifacts"] = list(manifest.get("artifacts", [])) + hooks
        manifest.update(extra or {})
        (dest / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        return dest / "murmur.yaml"

    return make


@pytest.fixture
def http_capsule(driver_wasm, greet_wasm, tmp_path):
    """http_capsule(server_url, hooks=[...], inference={overrides}, extra={...}) -> manifest path."""
    arts = tmp_path / "artifacts"
    for src, wasm in ((EXAMPLES / "murmur-driver-anthropic", driver_wasm), (EXAMPLES / "hello" / "greet", greet_wasm)):
        dest = arts / src.name
        shutil.copytree(src, dest, ignore=shutil.ignore_patterns("*.wasm", "__pycache__", "demo"))
        shutil.copyfile(wasm, dest / yaml.safe_load((src / "murmur.yaml").read_text())["requires_files"][0])

    def make(server_url: str, hooks: list[dict], inference: dict | None = None, extra: dict | None = None) -> Path:
        dest = tmp_path / "capsule"
        dest.mkdir(exist_ok=True)
        manifest = {
            "name": "hooked",
            "version": "0.1.0",
            "artifacts": [
                {"name": "murmur-driver-anthropic", "runtime": "driver",
                 "source": str(arts / "murmur-driver-anthropic"), "local_source": True},
                {"name": "greet", "runtime": "tool", "source": str(arts / "greet"), "local_source": True},
                *hooks,
            ],
            "capabilities": {"network": {"allow": ["127.0.0.1"]}},
            "inference": {"transport": "http", "endpoint": server_url, "model": "claude-haiku-4-5",
                          "api_key": "sk-ant-loopback", "max_turns": 6,
                          "driver": {"artifact": "murmur-driver-anthropic"}, **(inference or {})},
            **(extra or {}),
        }
        (dest / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
        return dest / "murmur.yaml"

    return make


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        self.server.hits.append(self.path)
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    """A plain HTTP server on 127.0.0.1; `.hits` lists the paths it served."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.hits = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()
