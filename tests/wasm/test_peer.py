"""murmur:artifact-manager/manage and murmur:message/send (mur.wasm.peer), called by a hand-written
guest built against upstream's interfaces (guests/peer/peer.wat)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mur.manifest.network import parse_allow_list
from mur.wasm.host import WasmHost
from mur.wasm.peer import Catalog, CatalogEntry
from mur.wasm.types import ToolInput

GUEST = Path(__file__).parent / "guests" / "peer" / "peer.wat"
CATALOG = Catalog("ses_1", [CatalogEntry("greet", "0.1.0", "wasm", "Says hello", input_schema='{"type":"object"}'),
                            CatalogEntry("bash", "0.0.0", "native", "Run bash")])


@pytest.fixture(scope="module")
def peer_wasm(tmp_path_factory) -> Path:
    from wasmtime import wat2wasm

    path = tmp_path_factory.mktemp("peer") / "peer.wasm"
    path.write_bytes(wat2wasm(GUEST.read_text()))
    return path


class _Peer(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.seen.append(body)
        message = body["params"]["message"]
        answer = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": {
            "id": "tsk_1", "contextId": message.get("contextId") or "ctx_9", "status": {"state": "submitted"}}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


@pytest.fixture
def peer_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Peer)
    server.seen = []
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def call(engine, make_cfg, wasm, data: str, catalog=CATALOG, allow=(), sent=None) -> str:
    host = WasmHost(engine=engine, catalog=catalog, on_send=sent.append if sent is not None else None)
    cfg = make_cfg(wasm, preopen=None, http_allow=parse_allow_list(list(allow)))
    return host.call_tool(cfg, ToolInput(data=data)).summary


def test_the_artifact_manager_answers_from_the_session_inventory(engine, make_cfg, peer_wasm):
    assert call(engine, make_cfg, peer_wasm, "l") == "2 greet"
    assert call(engine, make_cfg, peer_wasm, "dgreet") == "Says hello"
    assert call(engine, make_cfg, peer_wasm, "dghost") == "artifact 'ghost' is not installed"
    assert call(engine, make_cfg, peer_wasm, "rgreet") == "not implemented (name: greet)"  # upstream's answer
    refused = call(engine, make_cfg, peer_wasm, "pgreet")
    assert refused.startswith("error[E-RUN-002]: murmur:artifact-manager/manage#pull is not provided by mur")
    assert "greet@1.0.0" in refused


def test_outside_a_session_the_manager_says_so(engine, make_cfg, peer_wasm):
    assert call(engine, make_cfg, peer_wasm, "l", catalog=None) == "0"
    assert call(engine, make_cfg, peer_wasm, "dgreet", catalog=None).startswith("murmur:artifact-manager is only")


def test_message_send_reaches_an_allowed_peer_and_is_reported(engine, make_cfg, peer_wasm, peer_server):
    peer = f"localhost:{peer_server.server_port}"
    sent: list[dict] = []
    assert call(engine, make_cfg, peer_wasm, "s" + peer, allow=[f"http://{peer}"], sent=sent) == "submitted"
    [body] = peer_server.seen
    assert body["method"] == "message/send" and body["params"]["message"]["parts"] == [{"text": "hello"}]
    assert body["params"]["message"]["messageId"] == "m1"
    assert sent == [{"peer_url": peer, "message_id": "m1", "task_id": "tsk_1", "context_id": "ctx_9"}]


def test_message_send_to_a_peer_outside_the_allow_list_never_connects(engine, make_cfg, peer_wasm, peer_server):
    peer = f"localhost:{peer_server.server_port}"
    answer = call(engine, make_cfg, peer_wasm, "s" + peer, allow=["http://localhost:1"])
    assert answer == f"network policy: '{peer}' not in capabilities.network.allow"  # upstream's words
    assert peer_server.seen == []
