"""The door over real HTTP on 127.0.0.1 (mur.a2a.http1): methods, errors, limits, SSE."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from mur.a2a.lifecycle import TaskOutcome
from mur.testing.a2a_harness import Gate, message

QUEUE = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 4}
FRAME = re.compile(r"^id: (\d+)\nevent: ([a-z-]+)\ndata: (\{.*\})$")


def post_raw(h, body: bytes, content_type: str | None = "application/json", **kw) -> httpx.Response:
    headers = {"content-type": content_type} if content_type else {}
    return h.http.post("/", content=body, headers=headers, **kw)


def read_sse(response: httpx.Response) -> list[str]:
    """Raw frames (blank-line separated) until the server ends the response."""
    text = "".join(response.iter_text())
    return [block for block in text.split("\n\n") if block]


def stream_frames(h, method: str, params: dict | None = None, headers: dict | None = None) -> list[str]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    with h.http.stream("POST", "/", json=body, headers=headers or {}, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return read_sse(response)


def parse(block: str) -> tuple[int | None, str, dict]:
    lines = dict(line.split(": ", 1) for line in block.split("\n"))
    return (int(lines["id"]) if "id" in lines else None), lines["event"], json.loads(lines["data"])


# --- card and routing -------------------------------------------------------------------------


def test_agent_card(make_service):
    h = make_service(**QUEUE)
    card = h.http.get("/.well-known/agent-card.json").json()
    assert card["name"] == "echo" and card["version"] == "1.0.0"
    assert card["url"] == h.base  # the Host the client used
    assert card["capabilities"] == {
        "tools": [],
        "shell": False,
        "network": False,
        "streaming": True,
        "pushNotifications": False,
    }
    via_ip = httpx.get(f"http://127.0.0.1:{h.url.split(':')[1]}/.well-known/agent-card.json").json()
    assert via_ip["url"] == f"http://127.0.0.1:{h.url.split(':')[1]}"


@pytest.mark.parametrize(
    "method, path, status",
    [("GET", "/", 404), ("POST", "/other", 404), ("PUT", "/.well-known/agent-card.json", 404), ("DELETE", "/", 404)],
)
def test_anything_else_is_404(make_service, method, path, status):
    h = make_service(**QUEUE)
    assert h.http.request(method, path).status_code == status


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_wrong_content_type_is_415(make_service, content_type):
    h = make_service(**QUEUE)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "x"}}).encode()
    response = post_raw(h, body, content_type)
    assert response.status_code == 415
    assert "application/json" in response.json()["error"]


def test_json_content_type_with_charset_is_accepted(make_service):
    h = make_service(**QUEUE)
    body = json.dumps({"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": {"id": "tsk_nope"}}).encode()
    response = post_raw(h, body, "application/json; charset=utf-8")
    assert response.json()["error"]["code"] == -32001


# --- JSON-RPC errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b"{", b"not json at all", b"\xff\xfe\x00", b"", b"[" * 200_000],
    ids=["truncated", "text", "not-utf8", "empty", "deep-nesting"],
)
def test_malformed_json_is_parse_error(make_service, body):
    h = make_service(**QUEUE)
    response = post_raw(h, body)
    assert response.status_code == 200
    assert response.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}


@pytest.mark.parametrize(
    "doc",
    [[{"jsonrpc": "2.0", "id": 1, "method": "tasks/get"}], {"jsonrpc": "2.0", "id": 1}, "just a string", 42],
)
def test_not_a_request_is_invalid_request(make_service, doc):
    h = make_service(**QUEUE)
    assert post_raw(h, json.dumps(doc).encode()).json()["error"]["code"] == -32600


def test_unknown_method(make_service):
    h = make_service(**QUEUE)
    assert h.rpc("tasks/resubscribe", {"id": "x"}, request_id="r-9") == {
        "jsonrpc": "2.0",
        "id": "r-9",
        "error": {"code": -32601, "message": "Method not found"},
    }


@pytest.mark.parametrize(
    "params",
    [
        {"message": {"role": "user", "parts": [{"text": "x"}]}},
        {"message": {"messageId": "m", "role": "user", "parts": {"text": "x"}}},
        {"message": {"messageId": "m", "role": "user", "contextId": "../../../tmp/x", "parts": []}},
        {"message": []},
    ],
)
def test_bad_params(make_service, params):
    h = make_service(**QUEUE)
    reply = h.rpc("message/send", params, request_id=3)
    assert reply["id"] == 3
    assert reply["error"]["code"] == -32602
    assert reply["error"]["message"].startswith("Invalid params: ")
    assert h.service.registry.counts() == {}  # nothing was enqueued


def test_tasks_get_unknown_and_bad_id(make_service):
    h = make_service(**QUEUE)
    assert h.rpc("tasks/get", {"id": "tsk_missing"})["error"] == {"code": -32001, "message": "Task not found"}
    assert h.rpc("tasks/get", {})["error"]["code"] == -32001  # no id and nothing ran yet
    assert h.rpc("tasks/get", {"id": 12})["error"]["code"] == -32602


def test_oversized_body_is_413_and_the_server_lives_on(make_service):
    h = make_service(**QUEUE)
    big = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"pad": "x" * (2 << 20)}})
    response = post_raw(h, big.encode())
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600

    def chunks():  # no content-length: the limit is enforced while reading
        for _ in range(40):
            yield b"x" * 65536

    response = h.http.post("/", content=chunks(), headers={"content-type": "application/json"})
    assert response.status_code == 413
    assert h.send("still alive")["status"]["state"] == "submitted"


def test_a_body_just_under_the_limit_is_read(make_service):
    h = make_service(service_kw={"max_body": 4096}, **QUEUE)
    doc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message("y" * 3000)}}
    assert post_raw(h, json.dumps(doc).encode()).json()["result"]["status"]["state"] == "submitted"
    doc["params"]["message"]["parts"][0]["text"] = "y" * 5000
    assert post_raw(h, json.dumps(doc).encode()).status_code == 413


# --- methods ----------------------------------------------------------------------------------


def test_message_send_and_tasks_get(make_service):
    h = make_service(**QUEUE)
    result = h.send("hello", context_id="ctx_mine")
    assert re.fullmatch(r"tsk_[0-9a-f]{32}", result["id"])
    assert result == {"kind": "task", "id": result["id"], "contextId": "ctx_mine", "status": {"state": "submitted"}}
    done = h.wait(result["id"])
    assert done["status"]["state"] == "completed"
    assert done["artifacts"] == [
        {"artifactId": "response", "name": "response", "parts": [{"kind": "text", "text": "echo: hello"}]}
    ]
    assert done["status"]["message"]["role"] == "agent"
    assert h.rpc("tasks/get", {})["result"]["id"] == result["id"]  # no id: the last task (upstream)


def test_message_send_without_context_gets_a_fresh_one(make_service):
    h = make_service(**QUEUE)
    a, b = h.send("a"), h.send("b")
    assert re.fullmatch(r"ctx_[0-9a-f]{32}", a["contextId"]) and a["contextId"] != b["contextId"]


def test_params_without_message_key_are_the_message(make_service):
    h = make_service(**QUEUE)
    result = h.rpc("message/send", message("bare"))["result"]
    assert h.wait(result["id"])["artifacts"][0]["parts"][0]["text"] == "echo: bare"


# --- SSE --------------------------------------------------------------------------------------


def chatty(request, ctx):
    ctx.emit("status", {"state": "working", "message": "inference turn 1"})
    ctx.emit("artifact", {"tool_name": "grep", "content": "line one\nline two"})
    ctx.emit("text", {"text": "partial "})
    return TaskOutcome("completed", f"answer to {request.text}")


def test_message_stream_frames_and_final_closes(make_service):
    h = make_service(chatty, **QUEUE)
    frames = stream_frames(h, "message/stream", {"message": message("q1")})
    for block in frames:
        assert FRAME.match(block), block
    parsed = [parse(block) for block in frames]
    ids = [p[0] for p in parsed]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    events = [(event, data.get("status", {}).get("state")) for _, event, data in parsed]
    assert events == [
        ("status", "working"),
        ("status", "working"),
        ("artifact", None),
        ("text", None),
        ("status", "completed"),
    ]
    final = parsed[-1][2]
    assert final["final"] is True
    assert final["status"] == {"state": "completed", "message": "task completed", "response": "answer to q1"}
    assert all(data["final"] is False for _, e, data in parsed[:-1] if e == "status")
    assert parsed[2][2]["artifact"] == {"tool_name": "grep", "content": "line one\nline two"}
    assert parsed[3][2] == {"id": final["id"], "text": "partial ", "final": False}


def test_message_stream_only_carries_its_own_task(make_service):
    h = make_service(chatty, **QUEUE)
    first = h.send("first")
    h.wait(first["id"])
    frames = [parse(b) for b in stream_frames(h, "message/stream", {"message": message("second")})]
    assert {data["id"] for _, _, data in frames} == {frames[-1][2]["id"]} != {first["id"]}


def test_message_stream_bad_params_is_an_error_frame(make_service):
    h = make_service(**QUEUE)
    (block,) = stream_frames(h, "message/stream", {"message": {"role": "user"}})
    assert block.startswith("event: error\ndata: ")
    assert "Invalid params" in json.loads(block.split("data: ", 1)[1])["error"]


def test_message_stream_rejected_is_one_final_unnumbered_frame(make_service):
    gate = Gate()
    h = make_service(gate, task_acceptance="single")
    h.send("occupy")
    assert gate.started.wait(5)
    (block,) = stream_frames(h, "message/stream", {"message": message("too many")})
    event_id, event, data = parse(block)
    assert event_id is None and event == "status"
    assert data["final"] is True and data["status"]["state"] == "rejected"
    assert data["status"]["message"] == "task rejected: capsule is busy"
    gate.release.set()


def test_stream_watch_acks_replays_and_outlives_a_final_status(make_service):
    h = make_service(chatty, **QUEUE)
    first = h.send("one")
    h.wait(first["id"])
    body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}
    seen: list[tuple] = []
    with h.http.stream("POST", "/", json=body, timeout=10) as response:
        lines = response.iter_lines()
        block: list[str] = []
        second = None
        for line in lines:
            if line:
                block.append(line)
                continue
            seen.append(parse("\n".join(block)))
            block = []
            _, event, data = seen[-1]
            if event == "status" and data.get("final") and data["id"] == first["id"]:
                second = h.send("two")  # the stream stays open across tasks
            if second and event == "status" and data.get("final") and data["id"] == second["id"]:
                break
    assert seen[0] == (None, "connection-ack", {"role": "observer", "conversation_mode": "stateless"})
    finals = [data["id"] for _, e, data in seen if e == "status" and data.get("final")]
    assert finals == [first["id"], second["id"]]


def test_last_event_id_replays_only_later_frames(make_service):
    h = make_service(chatty, **QUEUE)
    h.wait(h.send("one")["id"])
    all_frames = [parse(b) for b in stream_frames(h, "message/stream", {"message": message("two")})]
    cut = all_frames[1][0]
    # A reconnecting message/stream with Last-Event-ID gets the buffered frames after it first.
    replayed = [parse(b) for b in stream_frames(h, "message/stream", {"message": message("three")}, {"last-event-id": str(cut)})]
    replay_ids = [p[0] for p in replayed if p[2]["id"] == all_frames[0][2]["id"]]
    assert replay_ids == [p[0] for p in all_frames if p[0] > cut]


def test_replay_reports_a_gap_when_the_buffer_moved_on(make_service):
    h = make_service(chatty, service_kw={"sse_buffer": 4}, **QUEUE)
    for text in ("a", "b"):
        h.wait(h.send(text)["id"])
    body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}
    with h.http.stream("POST", "/", json=body, headers={"last-event-id": "1"}, timeout=10) as response:
        text = ""
        for chunk in response.iter_text():
            text += chunk
            if text.count("\n\n") >= 6:
                break
    blocks = text.split("\n\n")
    assert blocks[0].startswith("event: connection-ack")
    assert blocks[1] == 'event: gap\ndata: {"first_available_id":7}'
    assert [parse(b)[0] for b in blocks[2:6]] == [7, 8, 9, 10]


def test_stream_watch_ends_with_capsule_closed_when_the_service_stops(make_service):
    h = make_service(**QUEUE)
    body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}
    with h.http.stream("POST", "/", json=body, timeout=10) as response:
        lines = response.iter_lines()
        assert next(lines) == "event: connection-ack"
        h.service.shutdown()
        h.join()
        h.service.stop()
        rest = list(lines)
    assert "event: capsule-closed" in rest


def test_idle_streams_get_heartbeat_comments(make_service, monkeypatch):
    from mur.a2a import server

    monkeypatch.setattr(server, "HEARTBEAT_SECS", 0.1)
    h = make_service(**QUEUE)
    body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}
    with h.http.stream("POST", "/", json=body, timeout=10) as response:
        lines = response.iter_lines()
        assert [next(lines), next(lines), next(lines)] == [
            "event: connection-ack",
            'data: {"role":"observer","conversation_mode":"stateless"}',
            "",
        ]
        assert next(lines) == ":heartbeat"
