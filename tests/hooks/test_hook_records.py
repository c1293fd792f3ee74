"""trace.jsonl events -> murmur:hook/lifecycle@0.5.0 records (the mapping hooks observe)."""

from __future__ import annotations

import pytest

from mur.hooks.records import (
    compaction_fields,
    lifecycle_call,
    message_text,
    output_of,
    to_record,
)

SID = "ses_019f01a940ce7761854e768ecbe3d399"


def ev(kind, **fields):
    return {"event_type": kind, "session_id": SID, "timestamp": 1, **fields}


def test_session_start_becomes_session_context():
    fn, rec = lifecycle_call(ev("session_start", capsule_name="demo", capsule_version="1.0.0", model=None,
                                capabilities=["network", "shell"], max_turns=10))
    assert fn == "on-session-start"
    assert rec == {"capsule-name": "demo", "capsule-version": "1.0.0", "session-id": SID, "model": "",
                   "capabilities": ["network", "shell"]}


def test_task_start_and_end():
    assert lifecycle_call(ev("task_start", task_id="tsk_1", context_id="ctx_1", source="a2a",
                             message_parts_bytes=12)) == (
        "on-task-start", {"task-id": "tsk_1", "context-id": "ctx_1", "source": "a2a", "input-bytes": 12})
    assert lifecycle_call(ev("task_end", task_id="tsk_1", exit_status="failed", duration_ms=3)) == (
        "on-task-end", {"task-id": "tsk_1", "exit-status": "failed"})


def test_inference_event_and_hook_origin_is_skipped():
    fn, rec = lifecycle_call(ev("inference", turn=2, input_tokens=320, output_tokens=17, decision="tool_call",
                                tool_name="greet"))
    assert fn == "on-inference"
    assert rec == {"turn": 2, "input-tokens": 320, "output-tokens": 17, "decision": "tool_call", "tool-name": "greet",
                   "prompt": None, "output": None, "tools": None}
    # a hook's own run-inference (and the built-in compactor's call) never re-enters on-inference
    assert lifecycle_call(ev("inference", turn=2, input_tokens=1, output_tokens=1, decision="end_turn",
                             origin="hook:summarizer", model="m")) is None
    assert lifecycle_call(ev("inference", turn=2, origin="compaction")) is None


def test_tool_and_shell_events():
    assert lifecycle_call(ev("tool_call", turn=1, tool_name="greet", input={"name": "Ada"}, input_bytes=15,
                             output_bytes=108, duration_ms=4, status="ok")) == (
        "on-tool-call", {"turn": 1, "tool-name": "greet", "input-bytes": 15, "output-bytes": 108,
                         "duration-ms": 4, "status": "ok"})
    fn, rec = lifecycle_call(ev("shell", turn=1, binary="/usr/bin/bash", command="x" * 300, exit_code=2,
                                stdout_bytes=5, stderr_bytes=0, duration_ms=9))
    assert fn == "on-shell"
    assert rec["command"] == "x" * 200  # upstream clips the command to 200 characters
    assert (rec["binary"], rec["exit-code"], rec["stdout"], rec["stderr"]) == ("/usr/bin/bash", 2, "", "")
    _, rec = lifecycle_call(ev("shell", command=["ls", "-l", "a b"], exit_code=-9))
    assert rec["command"] == "ls -l 'a b'" and rec["exit-code"] == -9


def test_session_end_totals():
    fn, rec = lifecycle_call(ev("session_end", total_turns=3, total_input_tokens=1260, total_output_tokens=49,
                                total_tool_calls=2, total_shell_calls=1, duration_ms=812, exit_status="ok"))
    assert fn == "on-session-end"
    assert rec == {"total-turns": 3, "total-input-tokens": 1260, "total-output-tokens": 49, "total-tool-calls": 2,
                   "total-shell-calls": 1, "duration-ms": 812, "exit-status": "ok"}


@pytest.mark.parametrize("kind", ["hook_dispatch_error", "task_reopened", "network_denied", "compaction",
                                  "skill_call", "a2a_task_received", "a2a_send", "something_new"])
def test_events_hooks_never_see(kind):
    assert lifecycle_call(ev(kind)) is None


def test_out_of_range_numbers_are_clamped():
    _, rec = lifecycle_call(ev("tool_call", turn=-1, input_bytes=2**70, output_bytes="junk"))
    assert (rec["turn"], rec["input-bytes"], rec["output-bytes"]) == (0, 2**64 - 1, 0)


def test_compaction_fields_flatten_block_content():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Greet Ada"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                          {"type": "tool_use", "id": "t1", "name": "greet", "input": {"name": "Ada"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Hello, Ada!"}]},
        {"role": "user", "content": "plain"},
    ]
    rec = compaction_fields(messages, 900, 0.8, None, "be short")
    assert rec["messages"] == [
        {"role": "user", "content": "Greet Ada"},
        {"role": "assistant", "content": 'ok\n[tool_use greet] {"name": "Ada"}'},
        {"role": "user", "content": "[tool_result] Hello, Ada!"},
        {"role": "user", "content": "plain"},
    ]
    assert (rec["session-tokens"], rec["threshold"], rec["model"], rec["system-prompt"]) == (900, 0.8, None, "be short")
    assert message_text([{"type": "tool_result", "is_error": True, "content": [{"type": "text", "text": "x"}]}]) == \
        "[tool_result (error)] x"


def test_to_record_builds_nested_wasmtime_records():
    rec = to_record({"messages": [{"role": "user", "content": "hi"}], "session-tokens": 3, "model": None})
    assert getattr(rec, "session-tokens") == 3 and rec.model is None
    assert rec.messages[0].role == "user" and rec.messages[0].content == "hi"


def test_output_of_reads_ok_and_err():
    from wasmtime.component import Variant

    assert output_of("boom") == (None, None, "boom")
    assert output_of(Variant("none")) == (None, None, None)
    assert output_of(Variant("reopen-task", "more")) == ("reopen-task", "more", None)
