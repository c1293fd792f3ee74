"""trace.jsonl files shaped like those upstream's `crates/murmur-cli/tests/trace_cmd.rs` writes (no task
events unless asked, upstream's field names), with our own data: the sessions its expectations run on."""

from __future__ import annotations

import json
from pathlib import Path

ID_A = "ses_0192f5e1a3b47c2d8e9f00000000a001"
ID_B = "ses_0192f5e1b9d07c2d8e9f00000000b002"
ID_C = "ses_0192f5e1c4417c2d8e9f00000000c003"


def line(kind: str, sid: str | None = None, ts: int | None = None, **fields) -> dict:
    """One event; upstream's later fixtures leave session_id and timestamp out, so may we."""
    head = {"event_type": kind}
    if sid is not None:
        head["session_id"] = sid
    if ts is not None:
        head["timestamp"] = ts
    return {**head, **fields}


def agent(sid: str, t0: int, turns: list[dict], exit_status: str, duration_ms: int, *, capsule: str = "relay",
          model: str = "claude-sonnet-4", max_turns: int = 12, compaction: tuple | None = None) -> list[dict]:
    """A session as upstream's FIXTURE_A/B: each turn {"in", "out", "tool"?, "ms"?, "status"?, "shell"?:
    (command, exit, ms), "input"?}; a turn without "tool" ends the loop. `compaction`: (turn, before, after),
    written after that turn."""
    ts = t0
    out = [line("session_start", sid, ts, capsule_name=capsule, capsule_version="2.4.1", model=model,
                max_turns=max_turns, capabilities=["shell"], tools_declared=["bash", "notes"])]
    tin = tout = tools = shells = 0
    for n, t in enumerate(turns, start=1):
        ts += 40
        out.append(line("inference", sid, ts, turn=n, input_tokens=t["in"], output_tokens=t["out"],
                        decision="tool_call" if t.get("tool") else "end_turn", tool_name=t.get("tool")))
        tin, tout = tin + t["in"], tout + t["out"]
        if t.get("tool"):
            ts += 40
            call = line("tool_call", sid, ts, turn=n, tool_name=t["tool"], input_bytes=42, output_bytes=17,
                        duration_ms=t["ms"], status=t.get("status", "ok"))
            if "input" in t:
                call["input"] = t["input"]
            out.append(call)
            tools += 1
        if t.get("shell"):
            command, code, ms = t["shell"]
            ts += 10
            out.append(line("shell", sid, ts, turn=n, command=command, exit_code=code, stdout_bytes=11,
                            stderr_bytes=0 if code == 0 else 33, duration_ms=ms))
            shells += 1
        if compaction and compaction[0] == n:
            ts += 10
            out.append(line("compaction", sid, ts, turn=n, tokens_before=compaction[1], tokens_after=compaction[2]))
    out.append(line("session_end", sid, ts + 50, total_turns=len(turns), total_input_tokens=tin,
                    total_output_tokens=tout, total_tool_calls=tools, total_shell_calls=shells,
                    duration_ms=duration_ms, exit_status=exit_status))
    return out


# A: 3 turns, ok, 2 tool calls (all ok; 100 ms on average), 1 shell call (exit 0, 30 ms), no compaction, 750 ms.
RUN_A = agent(ID_A, 5_000, [
    {"in": 1400, "out": 120, "tool": "notes", "ms": 60},
    {"in": 1600, "out": 90, "tool": "bash", "ms": 140, "shell": ("wc -l notes.md", 0, 30)},
    {"in": 1800, "out": 60},
], "ok", 750)

# B: 6 turns, max_turns_reached, 5 tool calls (one error; 104 ms on average), 5 shell calls (one exit 2; 34 ms on
# average), compaction at turn 4, 2.3 s.
RUN_B = agent(ID_B, 9_000, [
    {"in": 2000, "out": 300, "tool": "bash", "ms": 110, "shell": ("ls", 0, 40)},
    {"in": 2600, "out": 250, "tool": "bash", "ms": 90, "status": "error", "shell": ("grep -r todo", 2, 20)},
    {"in": 3100, "out": 200, "tool": "bash", "ms": 130, "shell": ("cat a.txt", 0, 60)},
    {"in": 3400, "out": 150, "tool": "bash", "ms": 70, "shell": ("cat b.txt", 0, 10)},
    {"in": 2200, "out": 100, "tool": "bash", "ms": 120, "shell": ("date", 0, 40)},
    {"in": 2500, "out": 80},
], "max_turns_reached", 2300, max_turns=6, compaction=(4, 8400, 1900))

# C: 1 turn, no calls at all.
RUN_C = agent(ID_C, 12_000, [{"in": 700, "out": 40}], "ok", 400, capsule="quiet", model="claude-haiku-4")


def text(events: list[dict]) -> str:
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events)


def write_file(directory: Path, name: str, events: list[dict] | str) -> str:
    """A trace.jsonl anywhere (upstream's `write_fixture`): its path, for the path form of an address."""
    path = directory / name
    path.write_text(events if isinstance(events, str) else text(events))
    return str(path)


def write_session(workdir: Path, sid: str, events: list[dict] | str) -> None:
    """`workdir/<sid>/trace.jsonl` (upstream's `write_session`)."""
    (workdir / sid).mkdir(parents=True, exist_ok=True)
    (workdir / sid / "trace.jsonl").write_text(events if isinstance(events, str) else text(events))


def tasks(sid: str, n: int) -> list[dict]:
    """One session serving n A2A tasks, each `task_start` .. inferences .. `task_end` (upstream's
    make_multi_task_fixture shape, our numbers): task i runs i+2 turns of 300 in / 20 out tokens."""
    out = [line("session_start", sid, 100, capsule_name="queue", capsule_version="1.0.0", model="claude-x",
                max_turns=30, capabilities=[], tools_declared=[])]
    turns = tin = tout = 0
    for i in range(n):
        task, ts = f"tsk_{i + 1:08x}aaaa7bbb8ccc00000000", 1_000 * (i + 1)
        out.append(line("a2a_task_received", sid, ts, task_id=task, context_id=f"ctx_{i}", message_id=f"m{i}",
                        traceparent_from_caller=None))
        out.append(line("task_start", sid, ts + 1, task_id=task, context_id=f"ctx_{i}", source="a2a",
                        message_parts_bytes=9))
        for t in range(i + 2):
            out.append(line("inference", sid, ts + 2 + t, turn=t, input_tokens=300, output_tokens=20,
                            decision="end_turn", tool_name=None))
        out.append(line("task_end", sid, ts + 50, task_id=task, exit_status="ok", duration_ms=100 * (i + 1),
                        turns=i + 2, input_tokens=300 * (i + 2), output_tokens=20 * (i + 2), tool_calls=0,
                        shell_calls=0))
        turns, tin, tout = turns + i + 2, tin + 300 * (i + 2), tout + 20 * (i + 2)
    out.append(line("session_end", sid, 99_000, total_turns=turns, total_input_tokens=tin, total_output_tokens=tout,
                    total_tool_calls=0, total_shell_calls=0, duration_ms=250 * n, exit_status="ok"))
    return out
