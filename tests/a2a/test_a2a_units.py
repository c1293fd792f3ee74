"""Pure pieces of the A2A layer: ids, JSON-RPC parsing, the registry, the SSE buffer, rendering."""

from __future__ import annotations

import json
import re
import threading

import pytest

from mur.a2a import protocol as rpc
from mur.a2a.render import WatchRenderer, short_context
from mur.a2a.lifecycle import lifecycle_with_overrides, resolve_idle_timeout
from mur.a2a.sse import EventHub, format_frame
from mur.a2a.tasks import (
    COMPLETED,
    FAILED,
    INPUT_TIMEOUT,
    REJECTED,
    REJECTED_BUSY,
    REJECTED_SESSION_ENDED,
    InputWaitEnded,
    Task,
    TaskRegistry,
)
from mur.errors import MurError
from mur.ids import context_id as new_context_id
from mur.ids import task_id as new_task_id
from mur.manifest.capsule import Lifecycle


def _task(text="t"):
    return Task(id=new_task_id(), context_id=new_context_id(), message_id="m", text=text)


def test_ids_are_prefixed_uuid7_simple_hex():
    ids = [new_task_id() for _ in range(50)]
    for task_id in ids:
        assert re.fullmatch(r"tsk_[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}", task_id), task_id
    assert len(set(ids)) == 50
    assert re.fullmatch(r"ctx_[0-9a-f]{32}", new_context_id())


@pytest.mark.parametrize(
    "body, code",
    [
        (b"{not json", rpc.PARSE_ERROR),
        (b"", rpc.PARSE_ERROR),
        (b"\xff\xfe", rpc.PARSE_ERROR),
        (b"[]", rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1}', rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"1.0","id":1,"method":"tasks/get"}', rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":{},"method":"tasks/get"}', rpc.INVALID_REQUEST),
        (b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":[1]}', rpc.INVALID_PARAMS),
    ],
)
def test_parse_request_errors(body, code):
    with pytest.raises(rpc.RpcError) as caught:
        rpc.parse_request(body)
    assert caught.value.code == code


def test_parse_request_defaults_params_and_keeps_id():
    req = rpc.parse_request(b'{"jsonrpc":"2.0","id":"abc","method":"stream/watch"}')
    assert (req.id, req.method, req.params) == ("abc", "stream/watch", {})


def test_parse_message_reads_both_part_shapes_and_joins_text():
    msg = rpc.parse_message(
        {
            "message": {
                "messageId": "m1",
                "role": "user",
                "contextId": "ctx_abc",
                "parts": [{"text": "one"}, {"kind": "text", "text": "two"}, {"kind": "file", "file": {}}],
            }
        }
    )
    assert (msg.message_id, msg.context_id, msg.text) == ("m1", "ctx_abc", "one\ntwo")


def test_parse_message_falls_back_to_params_as_the_message():
    msg = rpc.parse_message({"messageId": "m2", "role": "user", "parts": [{"text": "x"}]})
    assert msg.text == "x" and msg.context_id is None


@pytest.mark.parametrize(
    "message, why",
    [
        ({"role": "user", "parts": []}, "messageId"),
        ({"messageId": "m", "parts": []}, "role"),
        ({"messageId": "m", "role": "user", "parts": "hi"}, "parts must be an array"),
        ({"messageId": "m", "role": "user", "parts": [{"text": 3}]}, "parts[0].text"),
        ({"messageId": "m", "role": "user", "contextId": "../../etc", "parts": []}, "contextId"),
        ({"messageId": "m", "role": "user", "contextId": "a/b", "parts": []}, "contextId"),
        ("text", "message must be an object"),
    ],
)
def test_parse_message_rejects_bad_params(message, why):
    with pytest.raises(rpc.RpcError) as caught:
        rpc.parse_message({"message": message}, request_id=7)
    assert caught.value.code == rpc.INVALID_PARAMS
    assert caught.value.request_id == 7
    assert caught.value.message.startswith("Invalid params: ") and why in caught.value.message


def test_none_serves_no_task_starting_method():
    assert rpc.resolve_method("message/send", "none") is None
    assert rpc.resolve_method("message/stream", "none") is None
    assert rpc.resolve_method("tasks/get", "none") == "tasks/get"
    assert rpc.resolve_method("tasks/cancel", "none") == "tasks/cancel"
    assert rpc.resolve_method("tasks/resubscribe", "queue") is None


def test_task_result_shapes():
    task = _task()
    task.state = "input-required"
    task.prompt = "which branch?"
    out = rpc.task_result(task)
    assert out["artifacts"] == [
        {"artifactId": "prompt", "name": "prompt", "parts": [{"kind": "text", "text": "which branch?"}]}
    ]
    assert "message" not in out["status"]
    task.state, task.message, task.response, task.prompt = COMPLETED, "task completed", "42", None
    out = rpc.task_result(task)
    assert out["kind"] == "task" and out["status"]["state"] == "completed"
    assert out["status"]["message"]["parts"][0]["text"] == "task completed"
    assert out["artifacts"][0]["name"] == "response" and out["artifacts"][0]["parts"][0]["text"] == "42"


def test_status_frame_keeps_upstream_keys_and_adds_the_a2a_update():
    data = rpc.status_frame("tsk_1", "ctx_1", "completed", "task completed", "the answer", final=True)
    assert data["id"] == "tsk_1" and data["context_id"] == "ctx_1" and data["final"] is True
    assert data["status"] == {"state": "completed", "message": "task completed", "response": "the answer"}
    assert data["result"]["kind"] == "status-update" and data["result"]["final"] is True
    assert data["result"]["status"]["message"]["parts"][0]["text"] == "the answer"


def test_card_parses_with_the_a2a_sdk_as_a_v03_jsonrpc_interface():
    from a2a.client.card_resolver import parse_agent_card
    from a2a.compat.v0_3.versions import is_legacy_version

    card = rpc.build_card({"name": "echo", "version": "1.2.3", "capabilities": {"tools": ["a"]}}, "http://h:1", "queue")
    parsed = parse_agent_card(json.loads(json.dumps(card)))
    assert parsed.name == "echo" and parsed.capabilities.streaming
    (iface,) = parsed.supported_interfaces
    assert (iface.url, iface.protocol_binding) == ("http://h:1", "JSONRPC")
    assert is_legacy_version(iface.protocol_version)
    none_card = rpc.build_card({"name": "x", "version": "1"}, "http://h:1", "none")
    assert none_card["capabilities"]["streaming"] is False and none_card["skills"] == []


def test_registry_queue_depth_and_close():
    reg = TaskRegistry("queue", 2)
    accepted = [reg.submit(_task()) for _ in range(3)]
    assert [t.state for t in accepted] == ["submitted", "submitted", REJECTED]
    assert accepted[2].message == REJECTED_BUSY
    first = reg.take(0)
    assert first.id == accepted[0].id and first.state == "working"
    assert reg.submit(_task()).state == "submitted"  # a slot freed when the first started
    refused = reg.close()
    assert [t.message for t in refused] == [REJECTED_SESSION_ENDED] * 2
    assert reg.get(accepted[1].id).state == REJECTED
    assert reg.submit(_task()).message == "task rejected: the session is closing"


def test_registry_single_accepts_exactly_one():
    reg = TaskRegistry("single", 1)
    assert reg.submit(_task()).state == "submitted"
    assert reg.submit(_task()).state == REJECTED
    task = reg.take(0)
    reg.finish(task.id, COMPLETED, "task completed", "r")
    assert reg.submit(_task()).state == REJECTED  # single never takes a second task


def test_registry_input_timeout_forces_failed():
    reg = TaskRegistry("queue", 1)
    reg.submit(_task())
    task = reg.take(0)
    with pytest.raises(InputWaitEnded) as caught:
        reg.wait_for_input(task.id, "q?", 0.05)
    assert caught.value.reason == INPUT_TIMEOUT
    done = reg.finish(task.id, COMPLETED, "task completed", "ignored")
    assert (done.state, done.message, done.response) == (FAILED, INPUT_TIMEOUT, None)


def test_registry_delivers_input_to_the_waiting_task():
    reg = TaskRegistry("queue", 1)
    reg.submit(_task())
    task = reg.take(0)
    assert reg.deliver_input("too early") is None
    got = []
    waiter = threading.Thread(target=lambda: got.append(reg.wait_for_input(task.id, "q?", 5)))
    waiter.start()
    while reg.get(task.id).state != "input-required":
        pass
    assert reg.get(task.id).prompt == "q?"
    assert reg.deliver_input("main").state == "working"
    waiter.join(5)
    assert got == ["main"]


def test_registry_stop_wakes_an_input_wait():
    reg = TaskRegistry("queue", 1)
    reg.submit(_task())
    task = reg.take(0)
    threading.Timer(0.05, reg.stop).start()
    with pytest.raises(InputWaitEnded) as caught:
        reg.wait_for_input(task.id, "q?", None)
    assert caught.value.reason == "terminated"


def test_format_frame_is_upstreams_wire_format():
    assert format_frame("status", {"id": "x"}, 3) == 'id: 3\nevent: status\ndata: {"id":"x"}\n\n'
    assert format_frame("gap", {"first_available_id": 2}) == 'event: gap\ndata: {"first_available_id":2}\n\n'


def test_hub_replays_after_an_id_and_reports_a_gap():
    import asyncio

    hub = EventHub(capacity=3)
    for n in range(5):
        hub.publish("text", {"id": "t", "text": str(n), "final": False})
    loop = asyncio.new_event_loop()
    try:
        _, replay = hub.subscribe(loop, 3)  # buffer holds 3..5: complete replay of 4, 5
        assert replay.gap is None and [f.id for f in replay.frames] == [4, 5]
        _, replay = hub.subscribe(loop, 0)  # 1 and 2 were evicted
        assert replay.gap == 3 and [f.id for f in replay.frames] == [3, 4, 5]
        _, replay = hub.subscribe(loop, None)
        assert replay.frames == []
    finally:
        loop.close()


def test_lifecycle_overrides():
    base = Lifecycle()
    assert lifecycle_with_overrides(base) is base
    over = lifecycle_with_overrides(base, "queue", "sleep")
    assert (over.task_acceptance, over.after_task, over.queue_depth) == ("queue", "sleep", 1)
    with pytest.raises(MurError) as caught:
        lifecycle_with_overrides(base, task_acceptance="many")
    assert "must be one of: none, single, queue; got 'many'" in caught.value.message


def test_idle_timeout_resolution(monkeypatch):
    monkeypatch.delenv("MURMUR_A2A_TIMEOUT_SECS", raising=False)
    assert resolve_idle_timeout(None) == 30
    monkeypatch.setenv("MURMUR_A2A_TIMEOUT_SECS", "2")
    assert resolve_idle_timeout(None) == 2
    assert resolve_idle_timeout(5) == 5
    monkeypatch.setenv("MURMUR_A2A_TIMEOUT_SECS", "0")
    assert resolve_idle_timeout(None) is None  # 0 = wait forever
    monkeypatch.setenv("MURMUR_A2A_TIMEOUT_SECS", "soon")
    assert resolve_idle_timeout(None) == 30


def test_watch_renderer_lines():
    r = WatchRenderer()
    status = lambda state, msg, final=False, resp=None: {  # noqa: E731
        "id": "tsk_1",
        "context_id": "ctx_0123456789abcdef",
        "status": {"state": state, "message": msg, **({"response": resp} if resp else {})},
        "final": final,
    }
    assert r.render("status", status("working", "inference turn 1")).stdout == "[working]  inference turn 1\n"
    art = r.render("artifact", {"id": "tsk_1", "artifact": {"tool_name": "ls", "content": "a\nb"}}).stdout
    assert art == "[artifact] tool: ls | a\n  b\n"
    assert r.render("text", {"id": "tsk_1", "text": "partial", "final": False}).stdout == "partial"
    done = r.render("status", status("completed", "task completed", True, "the answer")).stdout
    assert done == "\n[completed]\n  the answer\n\n"
    assert r.render("status", status("failed", "boom", True)).stdout == "[failed]  boom\n"
    assert r.render("capsule-closed", {}).stderr == ["[murmur] capsule closed"]
    assert "first available id: 9" in r.render("gap", {"first_available_id": 9}).stderr[0]

    threaded = WatchRenderer()
    threaded.render("connection-ack", {"role": "observer", "conversation_mode": "threaded"})
    line = threaded.render("status", status("working", "turn")).stdout
    assert line == "[ctx_01234567... / turn 1 / working]  turn\n"
    threaded.render("status", status("completed", "task completed", True, "x"))
    assert "/ turn 2 / working]" in threaded.render("status", status("working", "again")).stdout
    assert short_context("ctx_0123456789") == "ctx_01234567..."


def _frames(n: int, size: int = 10):
    from mur.a2a.sse import Frame

    return [Frame(id=i, text="x" * size, task_id=None, final_status=False) for i in range(n)]


@pytest.mark.parametrize("bound, value, size", [("SUBSCRIBER_BACKLOG", 3, 10), ("SUBSCRIBER_BACKLOG_BYTES", 35, 10)])
def test_a_subscriber_that_falls_behind_is_cut_off_with_lagged(monkeypatch, bound, value, size):
    import asyncio

    from mur.a2a import sse

    monkeypatch.setattr(sse, bound, value)
    loop = asyncio.new_event_loop()
    try:
        sub = sse.Subscriber(loop)
        frames = _frames(6, size)
        for frame in frames:
            sub._put(frame)
        items = [sub.queue.get_nowait() for _ in range(sub.queue.qsize())]
        assert items == frames[:3] + [sse.LAGGED]
    finally:
        loop.close()


def test_a_subscriber_reading_its_frames_frees_its_byte_budget(monkeypatch):
    import asyncio

    from mur.a2a import sse

    monkeypatch.setattr(sse, "SUBSCRIBER_BACKLOG_BYTES", 25)
    loop = asyncio.new_event_loop()
    try:
        sub = sse.Subscriber(loop)
        for frame in _frames(5):
            sub._put(frame)
            assert loop.run_until_complete(sub.next(1)) is frame  # read as it comes: never cut off
        assert sub.queue.qsize() == 0
    finally:
        loop.close()


def test_a_stream_cancelled_as_its_next_frame_arrives_ends():
    """The stream of a client that went away is cancelled; if a frame is dequeued at that moment
    the cancel must still win (3.11's wait_for returned the frame, and the stream wrote on into
    nothing, subscribed for ever: the hostile-door test caught it under load)."""
    import asyncio

    import pytest as _pytest

    from mur.a2a import sse

    async def main() -> None:
        sub = sse.Subscriber(asyncio.get_running_loop())
        waiting = asyncio.create_task(sub.next(30))
        await asyncio.sleep(0)  # it waits on the empty queue
        sub._put(_frames(1)[0])  # the frame arrives ...
        waiting.cancel()  # ... as the client's disconnect cancels the stream
        with _pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())


def test_door_limits_come_from_the_environment_and_bad_values_keep_the_defaults():
    from mur.a2a.listen import DoorLimits

    env = {
        "MURMUR_A2A_MAX_CONNECTIONS": "12",
        "MURMUR_A2A_HEAD_TIMEOUT_SECS": "2.5",
        "MURMUR_A2A_BODY_TIMEOUT_SECS": "soon",
        "MURMUR_A2A_STALL_TIMEOUT_SECS": "0",
        "MURMUR_A2A_MAX_STREAMS": "-3",
        "MURMUR_A2A_KEEP_ALIVE_SECS": " 1 ",
    }
    limits = DoorLimits.from_env(env)
    assert limits == DoorLimits(max_connections=12, head_timeout=2.5, keep_alive=1.0)
    assert DoorLimits.from_env({}) == DoorLimits()
    assert DoorLimits() == DoorLimits(256, 10.0, 20.0, 5.0, 30.0, 64)
