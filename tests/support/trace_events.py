"""Synthetic session traces (upstream.md 3.3 schema) and a CLI runner shared by the trace, eval and otel tests."""

from __future__ import annotations

import json

from mur_cli import Result, run_mur

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


def sid(n: int) -> str:
    """The n-th session id of a test workdir (ids sort in creation order, as UUIDv7 ones do)."""
    return f"ses_019f01a940ce7761854e768ecbe3{n:04x}"


def sid_at(created_ms: int, n: int) -> str:
    """A session id created at `created_ms` (Unix ms), as mur's UUIDv7 ids are: `--since` reads it."""
    return f"ses_{created_ms:012x}7aaa8aaa0000{n:08x}"


def agent_session(session_id: str, t0: int, turns: list[list[tuple[str, str, int]]], exit_status: str = "ok",
                  duration_ms: int = 1000, compaction_turn: int | None = None) -> list[dict]:
    """One task_md task, one attempt: each entry of `turns` is a turn whose inference asks for tools, then
    its (tool, status, duration_ms) calls; a `bash` call is followed by its `shell` line (5 ms shorter).
    A last end_turn inference closes the loop. Turn i's inference reads 1000+100*i tokens and writes
    50+10*i."""

    def ev(kind: str, dt: int, **fields) -> dict:
        return {"event_type": kind, "session_id": session_id, "timestamp": t0 + dt, **fields}

    out = [
        ev("task_start", 0, task_id="tsk_" + session_id[-8:], context_id="ctx_1", source="task_md",
           message_parts_bytes=12),
        ev("session_start", 1, capsule_name="agent", capsule_version="1.2.0", model="claude-x", max_turns=8,
           capabilities=["shell"], tools_declared=["bash", "read_file", "write_file"],
           containment_declared="advisory", containment_achieved="scoped", workdir_exec=False,
           system_prompt_source="manifest", system_prompt_sha256="ab" * 32, effective_grants={"floor_met": True}),
    ]
    dt, tin, tout, ntools, nshell = 10, 0, 0, 0, 0
    for i, calls in enumerate(turns + [[]]):
        if compaction_turn == i:
            out.append(ev("compaction", dt, turn=i, tokens_before=12000, tokens_after=900))
        tin, tout = tin + 1000 + 100 * i, tout + 50 + 10 * i
        out.append(ev("inference", dt + 1, turn=i, input_tokens=1000 + 100 * i, output_tokens=50 + 10 * i,
                      decision="tool_call" if calls else "end_turn", tool_name=calls[0][0] if calls else None))
        dt += 2
        for tool, status, ms in calls:
            dt += ms
            out.append(ev("tool_call", dt, turn=i, tool_name=tool, input={"arg": tool}, input_bytes=13,
                          output_bytes=100, duration_ms=ms, status=status))
            ntools += 1
            if tool == "bash":
                out.append(ev("shell", dt, turn=i, binary="/usr/bin/bash", command=f"echo {i}", exit_code=0,
                              stdout_bytes=2, stderr_bytes=0, duration_ms=ms - 5))
                nshell += 1
    n = len(turns) + 1
    out.append(ev("session_end", dt + 1, total_turns=n, total_input_tokens=tin, total_output_tokens=tout,
                  total_tool_calls=ntools, total_shell_calls=nshell, duration_ms=duration_ms,
                  exit_status=exit_status))
    out.append(ev("task_end", dt + 2, task_id="tsk_" + session_id[-8:], exit_status=exit_status,
                  duration_ms=duration_ms + 1, turns=n, input_tokens=tin, output_tokens=tout, tool_calls=ntools,
                  shell_calls=nshell, reopen_count=0))
    return out


def write_trace(root, session_id: str, events: list[dict] | str):
    """`root/<session_id>/trace.jsonl` holding the events (or the raw text given)."""
    d = root / session_id
    d.mkdir(parents=True, exist_ok=True)
    text = events if isinstance(events, str) else "".join(json.dumps(e) + "\n" for e in events)
    (d / "trace.jsonl").write_text(text)
    return d


def mur(*args: str, cwd) -> Result:
    """Run the real CLI in-process (mur.cli.main.main) in `cwd`, MUR_DEBUG unset."""
    return run_mur(*args, cwd=cwd, env={"MUR_DEBUG": None})
