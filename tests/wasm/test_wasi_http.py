"""wasi:http for guests built against upstream's WIT (mur.wasm.wasi_http): a hand-written raw
wasi:http guest (guests/wasi_http/probe.wat, what upstream's drivers import) against a real loopback
server, held to the allow list like murmur:http/outbound."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mur.manifest.capsule import Limits
from mur.manifest.network import parse_allow_list
from mur.wasm.types import ToolInput

GUEST = Path(__file__).parent / "guests" / "wasi_http" / "probe.wat"


@pytest.fixture(scope="module")
def probe_wasm(tmp_path_factory) -> Path:
    from wasmtime import wat2wasm

    path = tmp_path_factory.mktemp("wasi-http") / "probe.wasm"
    path.write_bytes(wat2wasm(GUEST.read_text()))
    return path


def _call(host, make_cfg, wasm, target: str, allow: list[str], **kw):
    events: list[dict] = []
    cfg = make_cfg(wasm, http_allow=parse_allow_list(allow), on_http=events.append, preopen=None, **kw)
    return host.call_tool(cfg, ToolInput(data=target)), events


def test_allowed_request_reaches_the_server(host, make_cfg, probe_wasm, http_server):
    target = f"127.0.0.1:{http_server.server_port}"
    result, events = _call(host, make_cfg, probe_wasm, target, [f"http://{target}"])
    assert result.summary == "status:200"
    assert http_server.hits == ["/probe"]
    assert events == [{"url": f"http://{target}/probe", "method": None, "allowed": True}]


@pytest.mark.parametrize("allow", [[], ["http://127.0.0.1:1"], ["https://127.0.0.1"]])
def test_request_outside_the_allow_list_is_denied_and_never_sent(host, make_cfg, probe_wasm, http_server, allow):
    target = f"127.0.0.1:{http_server.server_port}"
    result, events = _call(host, make_cfg, probe_wasm, target, allow)
    assert result.summary == "denied"  # upstream's ErrorCode::HttpRequestDenied
    assert http_server.hits == []
    assert events[0]["allowed"] is False
    assert "not in capabilities.network.allow" in events[0]["error"]


class _Slow(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        self.server.reached.set()
        self.server.release.wait(20)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_response_slower_than_the_deadline_fails_the_request_not_the_session(host, make_cfg, probe_wasm):
    # The guest blocks in wasmtime's host code, where no epoch deadline reaches it: mur caps the
    # request's timeouts at what is left of the deadline, so the wait ends with an error-code.
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    server.reached, server.release = threading.Event(), threading.Event()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        target = f"127.0.0.1:{server.server_port}"
        result, _ = _call(host, make_cfg, probe_wasm, target, [f"http://{target}"], limits=Limits(deadline_seconds=1))
        assert server.reached.wait(10), "the request reached the server (its handler may run after the guest gave up)"
        assert result.summary.startswith("error:"), result.summary
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def test_the_handler_shadows_wasmtimes_at_the_version_it_defines():
    # Shadowing needs wasmtime's exact outgoing-handler name: a wasmtime upgrade that moves it
    # must fail here, not let requests bypass the allow list.
    from wasmtime import Engine
    from wasmtime.component import Linker

    from mur.wasm.wasi_http import HANDLER

    linker = Linker(Engine())
    linker.add_wasip2()
    linker.add_wasi_http()
    with pytest.raises(Exception, match="defined twice"):
        with linker.root() as root:
            with root.add_instance(HANDLER) as inst:
                inst.add_func("handle", lambda *a: None)


def test_each_call_gets_its_own_helper(host, make_cfg, probe_wasm, http_server):
    # The helper instance lives in the guest's Store: a second call (a fresh Store) works too.
    target = f"127.0.0.1:{http_server.server_port}"
    for _ in range(2):
        result, _ = _call(host, make_cfg, probe_wasm, target, [f"http://{target}"])
        assert result.summary == "status:200"
    assert http_server.hits == ["/probe", "/probe"]
