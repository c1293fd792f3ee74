"""Driver continuation (mur.inference.continuation + DriverModelClient): upstream's protocol."""

from __future__ import annotations

import json

from mur.inference.continuation import Continuation
from mur.inference.driver import DriverModelClient
from mur.inference.messages import estimate_tokens
from mur.wasm.types import ToolResult

USER = {"role": "user", "content": [{"type": "text", "text": "hi"}]}
CALL = {"role": "assistant", "content": [{"type": "tool_call", "id": "t1", "name": "bash", "input": {}}]}
RESULT = {"role": "tool", "tool_call_id": "t1", "is_error": False, "content": [{"type": "text", "text": "ok"}]}


def payload(*messages):
    return {"model": "m", "max_tokens": 8, "messages": list(messages), "tools": [], "params": {}}


def test_without_an_id_the_payload_goes_in_full_without_the_key():
    held = Continuation()
    assert held.wire(payload(USER), "ctx") == payload(USER)
    held.record(None, [USER], "ctx")
    assert held.wire(payload(USER, CALL, RESULT), "ctx") == payload(USER, CALL, RESULT)


def test_a_held_id_sends_only_the_unseen_tail_with_the_key():
    held = Continuation()
    held.record("cont-1", [USER], "ctx")
    wire = held.wire(payload(USER, CALL, RESULT), "ctx")
    assert wire["messages"] == [CALL, RESULT] and wire["continuation_id"] == "cont-1"


def test_silence_drops_it_and_another_context_or_a_replaced_prefix_resends_in_full():
    held = Continuation()
    held.record("cont-1", [USER], "ctx")
    assert "continuation_id" not in held.wire(payload(USER, CALL), "other-ctx")
    replaced = {"role": "user", "content": [{"type": "text", "text": "summary"}]}  # a compaction's new context
    assert held.wire(payload(replaced, CALL), "ctx") == payload(replaced, CALL)
    held.record("", [USER], "ctx")  # an empty value is no id
    assert held.wire(payload(USER, CALL), "ctx") == payload(USER, CALL)


def test_a_finished_task_advances_past_the_answer_the_driver_wrote():
    held = Continuation()
    held.record("cont-1", [USER], "ctx")
    answer = {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
    held.advance([USER, answer], "ctx")
    follow_up = {"role": "user", "content": [{"type": "text", "text": "and now?"}]}
    assert held.wire(payload(USER, answer, follow_up), "ctx")["messages"] == [follow_up]


def test_the_client_wires_the_tail_but_estimates_tokens_from_the_full_payload():
    sent = []

    def driver(data):
        sent.append(json.loads(data))
        return ToolResult("passed", data=json.dumps({"stop_reason": "end_turn", "content": [{"type": "text", "text": "x"}]}),
                          metadata=[("continuation_id", "cont-7")])

    client = DriverModelClient(driver, continuation=Continuation(), context_id="ctx")
    first = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    client.complete(first)
    second = {**first, "messages": first["messages"] + [
        {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
        {"role": "user", "content": [{"type": "text", "text": "more"}]}]}
    response = client.complete(second)
    assert "continuation_id" not in sent[0] and len(sent[0]["messages"]) == 1
    assert sent[1]["continuation_id"] == "cont-7" and len(sent[1]["messages"]) == 2
    full = {k: v for k, v in sent[1].items() if k != "continuation_id"}
    full["messages"] = sent[0]["messages"] + sent[1]["messages"]
    assert response["usage"]["input_tokens"] == estimate_tokens(json.dumps(full, ensure_ascii=False))
