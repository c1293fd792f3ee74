"""A synthetic two-task session trace (upstream.md 3.3 schema) shared by the observability tests."""

from __future__ import annotations

import pytest

SID = "ses_019f01a940ce7761854e768ecbe3d399"
T0 = 1_760_000_000_000  # Unix ms


def session_events(sid: str = SID, t0: int = T0) -> list[dict]:
    """task 1: inference -> tool_call(bash) + shell -> compaction -> inference(end_turn); task 2: one failed turn."""

    def ev(kind: str, dt: int, **fields) -> dict:
        return {"event_type": kind, "session_id": sid, "timestamp": t0 + dt, **fields}

    return [
        ev("a2a_task_received", 0, task_id="tsk_1", context_id="ctx_1", message_id="m1",
           traceparent_from_caller="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ev("task_start", 1, task_id="tsk_1", context_id="ctx_1", source="a2a", message_parts_bytes=5),
        ev("session_start", 2, capsule_name="hello", capsule_version="0.1.0", model="claude-x", max_turns=5,
           capabilities=["shell"], tools_declared=["bash"], containment_declared="advisory",
           containment_achieved="scoped", workdir_exec=False, system_prompt_source="none",
           system_prompt_sha256=None, effective_grants={"floor_met": True}),
        ev("inference", 120, turn=0, input_tokens=100, output_tokens=20, decision="tool_call", tool_name="bash"),
        ev("tool_call", 200, turn=0, tool_name="bash", input={"command": "ls -la " + "x" * 300},
           input_bytes=321, output_bytes=40, duration_ms=70, status="ok"),
        ev("shell", 201, turn=0, binary="/usr/bin/bash", command="ls -la " + "x" * 300, exit_code=0,
           stdout_bytes=30, stderr_bytes=0, duration_ms=50),
        ev("compaction", 260, turn=1, tokens_before=9000, tokens_after=800),
        ev("inference", 400, turn=1, input_tokens=150, output_tokens=30, decision="end_turn", tool_name=None),
        ev("session_end", 410, total_turns=2, total_input_tokens=250, total_output_tokens=50, total_tool_calls=1,
           total_shell_calls=1, duration_ms=408, exit_status="ok"),
        ev("task_end", 411, task_id="tsk_1", exit_status="ok", duration_ms=410, turns=2, input_tokens=250,
           output_tokens=50, tool_calls=1, shell_calls=1, reopen_count=0),
        ev("task_start", 1000, task_id="tsk_2", context_id="ctx_2", source="a2a", message_parts_bytes=3),
        ev("session_start", 1001, capsule_name="hello", capsule_version="0.1.0", model="claude-x", max_turns=5,
           capabilities=["shell"], tools_declared=["bash"], containment_declared="advisory",
           containment_achieved="scoped", workdir_exec=False, system_prompt_source="none",
           system_prompt_sha256=None),
        ev("inference", 1100, turn=0, input_tokens=10, output_tokens=2, decision="tool_call", tool_name="nope"),
        ev("tool_call", 1105, turn=0, tool_name="nope", input={}, input_bytes=2, output_bytes=50, duration_ms=1,
           status="error"),
        ev("session_end", 1150, total_turns=3, total_input_tokens=260, total_output_tokens=52, total_tool_calls=2,
           total_shell_calls=1, duration_ms=149, exit_status="failed"),
        ev("task_end", 1151, task_id="tsk_2", exit_status="failed", duration_ms=151, turns=1, input_tokens=10,
           output_tokens=2, tool_calls=1, shell_calls=0, reopen_count=0),
    ]


@pytest.fixture
def events() -> list[dict]:
    return session_events()
