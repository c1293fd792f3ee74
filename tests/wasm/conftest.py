"""Real componentize-py guests and a real wasmtime engine, built once and cached across sessions.

Guest builds go through mur.wasm.build (cached by input hash under $MUR_CACHE_DIR or
~/.murmur/cache/components) and compiled components through the engine's cache, so only the first
session on a machine pays the ~15 s per guest.
"""

from __future__ import annotations

import shutil
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mur.manifest.capsule import Limits
from mur.wasm.build import WIT_ROOT, build_component
from mur.wasm.engine import WasmEngine
from mur.wasm.host import GuestConfig, WasmHost

GUESTS = Path(__file__).parent / "guests"


def _need_componentize_py() -> None:
    if shutil.which("componentize-py") is None and not (
        Path(__import__("sys").executable).parent / "componentize-py"
    ).is_file():
        pytest.skip("componentize-py is not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="session")
def engine() -> WasmEngine:
    eng = WasmEngine()  # default cache dir: compiled guests persist across sessions
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def probe_wasm() -> Path:
    _need_componentize_py()
    return build_component(GUESTS / "probe", "tool")


@pytest.fixture(scope="session")
def capsule_probe_wasm() -> Path:
    _need_componentize_py()
    return build_component(GUESTS / "capsule_probe", "capsule")


@pytest.fixture(scope="session")
def sockets_wasm(tmp_path_factory) -> Path:
    """A tool built against a test world that imports raw wasi:sockets."""
    _need_componentize_py()
    wit = tmp_path_factory.mktemp("sockets-wit")
    shutil.copytree(GUESTS / "sockets" / "wit", wit, dirs_exist_ok=True)
    shutil.copytree(WIT_ROOT / "guest" / "deps" / "murmur-tool", wit / "deps" / "murmur-tool")
    return build_component(GUESTS / "sockets", "sockets-probe", wit_dir=wit)


@pytest.fixture
def limits() -> Limits:
    return Limits(deadline_seconds=20)


@pytest.fixture
def host(engine) -> WasmHost:
    return WasmHost(engine=engine)


@pytest.fixture
def make_cfg(tmp_path, limits):
    """GuestConfig factory with a fresh preopen dir (tmp_path/'work') by default."""
    work = tmp_path / "work"
    work.mkdir()

    def make(wasm: Path, **kw) -> GuestConfig:
        kw.setdefault("label", "probe")
        kw.setdefault("preopen", work)
        kw.setdefault("env", [])
        kw.setdefault("limits", limits)
        kw.setdefault("http_allow", [])
        return GuestConfig(wasm_path=wasm, **kw)

    make.work = work
    return make


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        self.server.hits.append(self.path)
        body = f"hello from {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    """A real HTTP server on 127.0.0.1; `.hits` lists the paths it served."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.hits = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tcp_listener():
    """A bare TCP listener on 127.0.0.1 that records whether anything connected."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    sock.settimeout(0.3)
    yield sock
    sock.close()
