"""The A2A door against a hostile caller, with a bearer token set: real sockets on 127.0.0.1.

Each refusal is a clean HTTP status carrying a JSON-RPC error (never a reset, never a traceback),
no refused request creates a task, and after each storm the door still answers the card and
completes a new authorized task. Limits are lowered (DoorLimits) so each storm takes about a second.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from mur.a2a import protocol as rpc
from mur.a2a.auth import DoorAuth
from mur.a2a.http1 import EVICT_AFTER
from mur.a2a.listen import DoorLimits
from mur.testing.a2a_harness import message
from mur.testing.sockets import read_all

TOKEN = "s3cret-token-0123456789abcdef"
AUTH = {"authorization": f"Bearer {TOKEN}"}
QUEUE = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 4}
FAST = DoorLimits(max_connections=8, head_timeout=0.5, body_timeout=0.7, keep_alive=0.5, stall_timeout=0.5, max_streams=3)


@pytest.fixture
def door(make_service):
    h = make_service(service_kw={"limits": FAST, "auth": DoorAuth(token=TOKEN)}, **QUEUE)
    h.http.headers.update(AUTH)
    return h


def connect(h) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", int(h.url.rsplit(":", 1)[1])))
    sock.settimeout(5)
    return sock


def answer(raw: bytes) -> tuple[int, dict]:
    """(HTTP status, JSON body) of one HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), raw[:200]
    return int(head[9:12]), json.loads(body or b"null")


def post(body: bytes, extra: str = "", path: str = "/", auth: bool = True) -> bytes:
    token = f"authorization: Bearer {TOKEN}\r\n" if auth else ""
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"{token}{extra}connection: close\r\n\r\n").encode() + body


def rpc_body(method: str, params: dict | None = None, request_id=1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}).encode()


def tasks_created(h) -> int:
    return sum(h.service.registry.counts().values())


def healthy(h) -> None:
    assert h.http.get("/.well-known/agent-card.json").status_code == 200
    task = h.send("still here")
    assert h.wait(task["id"])["status"]["state"] == "completed"


# --- bodies ---------------------------------------------------------------------------------------


def test_oversized_bodies_get_413_with_a_json_rpc_error(door):
    before = tasks_created(door)
    big = rpc_body("message/send", {"message": message("x" * (rpc.MAX_BODY + 10))})
    for raw in (post(big),  # declared too big
                (f"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer {TOKEN}\r\n"
                 f"transfer-encoding: chunked\r\n\r\n").encode()  # streamed past the cap, no length declared
                + b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536]) for i in range(0, len(big), 65536))
                + b"0\r\n\r\n"):
        with connect(door) as sock:
            sock.sendall(raw)
            status, body = answer(read_all(sock))
        assert status == 413 and body["error"]["code"] == rpc.INVALID_REQUEST and "larger than" in body["error"]["message"]
    assert tasks_created(door) == before
    healthy(door)


def test_a_slow_body_gets_408_and_creates_nothing(door):
    before = tasks_created(door)
    body = rpc_body("message/send", {"message": message("slow")})
    with connect(door) as sock:
        sock.sendall(post(body)[: -len(body)])
        sent = b""
        started = time.monotonic()
        try:
            for byte in body:
                sock.send(bytes([byte]))
                sent += bytes([byte])
                time.sleep(0.1)  # each byte well inside any per-read timeout: only a deadline ends it
                if time.monotonic() - started > 5:
                    break
        except OSError:
            pass
        status, answer_body = answer(read_all(sock))
    assert status == 408 and answer_body["error"]["code"] == rpc.INVALID_REQUEST
    assert len(sent) < len(body)
    assert tasks_created(door) == before
    healthy(door)


# --- connections ----------------------------------------------------------------------------------


def test_many_connections_stay_bounded_and_an_authorized_client_gets_in(door):
    held = []
    try:
        for _ in range(4 * FAST.max_connections):
            sock = connect(door)
            sock.sendall(b"POST / HTTP/1.1\r\n")  # half a head, then silence
            held.append(sock)
        time.sleep(EVICT_AFTER + 0.2)
        healthy(door)
        time.sleep(FAST.head_timeout + 0.5)
        closed = 0
        for sock in held:
            sock.settimeout(0.5)
            try:
                data = sock.recv(4096)
                closed += data == b"" or data.startswith((b"HTTP/1.1 408", b"HTTP/1.1 503"))
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        assert closed == len(held)  # every slow connection was answered and closed, none kept
    finally:
        for sock in held:
            sock.close()
    healthy(door)


# --- JSON-RPC -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "code"), [
    (b"{", rpc.PARSE_ERROR),
    (b"\xff\xfe{}", rpc.PARSE_ERROR),
    (b"[" * 100_000 + b"]" * 100_000, rpc.PARSE_ERROR),  # nesting deep enough to blow a recursive parser
    (b'[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}]', rpc.INVALID_REQUEST),  # batch
    (b'{"jsonrpc":"2.0","method":"message/send","params":{}}', rpc.INVALID_REQUEST),  # notification
    (b'{"jsonrpc":"2.0","id":1,"id":2,"method":"tasks/get"}', rpc.INVALID_REQUEST),  # duplicate key
    (b'{"jsonrpc":"1.0","id":1,"method":"tasks/get"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"tasks/get"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc":"2.0","id":1' + b"0" * 5000 + b',"method":"tasks/get"}', rpc.INVALID_REQUEST),  # an id too big
    (b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":[]}', rpc.INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":NaN}}', rpc.INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":1e99999}}', rpc.INVALID_PARAMS),
    (b'{"jsonrpc":"2.0","id":1,"method":"no/such"}', rpc.METHOD_NOT_FOUND),
    (b'{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"messageId":"m","role":"user",'
     b'"parts":[{"kind":"file","file":{"name":"x"}}]}}}', rpc.INVALID_PARAMS),  # no text part
])
def test_malformed_json_rpc_gets_its_error_and_runs_nothing(door, body, code):
    before = tasks_created(door)
    with connect(door) as sock:
        sock.sendall(post(body))
        status, answer_body = answer(read_all(sock))
    assert status == 200 and answer_body["jsonrpc"] == "2.0" and answer_body["error"]["code"] == code, answer_body
    assert tasks_created(door) == before
    healthy(door)


# --- the token ------------------------------------------------------------------------------------


@pytest.mark.parametrize("presented", [
    None, "", "Bearer", "Bearer ", f"Basic {TOKEN}", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", f"Bearer {TOKEN[0]}",
    f"Bearer {TOKEN.upper()}", "Bearer " + "a" * 10_000, f"Bearer {TOKEN}\x00",
])
def test_a_wrong_token_of_any_length_gets_the_same_401(door, presented):
    """The answer names no length and no matched prefix: the body is one of two fixed texts."""
    headers = {"content-type": "application/json", "authorization": presented}
    if presented is None:
        del headers["authorization"]
    import httpx
    with httpx.Client(base_url=door.base, timeout=10) as client:
        try:
            response = client.post("/", content=rpc_body("tasks/get", {"id": "t"}), headers=headers)
        except (httpx.LocalProtocolError, ValueError):
            pytest.skip("httpx refuses to send this header value")
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] == rpc.UNAUTHORIZED
    assert error["message"] in ("Unauthorized: the bearer token is wrong",
                                "Unauthorized: this capsule needs Authorization: Bearer <token>")


@pytest.mark.parametrize("query", [f"access_token={TOKEN}", f"x=1&ACCESS_TOKEN={TOKEN}", "token=guess", "bearer="])
def test_a_token_in_the_query_string_is_refused_even_with_the_right_header(door, query):
    before = tasks_created(door)
    for auth in (True, False):
        with connect(door) as sock:
            sock.sendall(post(rpc_body("message/send", {"message": message("leaky")}), path=f"/?{query}", auth=auth))
            status, body = answer(read_all(sock))
        assert status == 400 and body["error"]["code"] == rpc.INVALID_REQUEST
        assert "never in the URL" in body["error"]["message"]
    assert tasks_created(door) == before
    # the control: the header alone, and an unrelated query
    with connect(door) as sock:
        sock.sendall(post(rpc_body("tasks/get", {"id": "nope"}), path="/?x=1"))
        status, body = answer(read_all(sock))
    assert status == 200 and "error" in body and body["error"]["code"] != rpc.UNAUTHORIZED
    healthy(door)


# --- file parts and ids that look like paths ------------------------------------------------------


def test_file_parts_naming_paths_outside_the_workdir_write_and_read_nothing(door, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("outside-secret\n")
    target = outside / "pwned"
    rel = "../" * 12 + str(target).lstrip("/")
    parts = [
        {"kind": "text", "text": "look at the files"},
        {"kind": "file", "file": {"name": rel, "mimeType": "text/plain", "bytes": "cHduZWQ="}},
        {"kind": "file", "file": {"name": str(target), "uri": f"file://{secret}"}},
        {"kind": "file", "file": {"name": "..\\..\\pwned", "uri": "file:///etc/passwd"}},
        {"kind": "data", "data": {"path": rel}},
    ]
    params = {"message": {"messageId": "m-traversal", "role": "user", "parts": parts}}
    task = door.rpc("message/send", params)["result"]
    done = door.wait(task["id"])
    assert done["status"]["state"] == "completed"
    answer_text = json.dumps(done)
    assert "outside-secret" not in answer_text and "root:" not in answer_text
    assert not target.exists() and sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    session = Path(door.workdir)
    assert not any(p.name == "pwned" for p in session.parent.rglob("pwned"))


@pytest.mark.parametrize("context_id", ["../../etc", "a/b", "..", "x\x00y", "/abs", "c" * 200])
def test_a_context_id_that_is_a_path_is_refused(door, context_id):
    before = tasks_created(door)
    with connect(door) as sock:
        sock.sendall(post(rpc_body("message/send", {"message": message("hi", context_id)})))
        status, body = answer(read_all(sock))
    assert status == 200 and body["error"]["code"] == rpc.INVALID_PARAMS and "contextId" in body["error"]["message"]
    assert tasks_created(door) == before
    for task_id in ("../../etc/passwd", "/etc/passwd"):
        got = door.rpc("tasks/get", {"id": task_id})
        assert "error" in got and "result" not in got
