"""One session's trace.jsonl as numbers: what `mur trace show` prints and `--json` emits, and what
`diff` and `report` compare (one owner, so the views agree).

A trace needs a `session_start` and a `session_end` (E-TRC-001 otherwise, as upstream); the totals
(turns, tokens) are the last `session_end`'s, which count the whole session; calls are counted from
their events. Calls and turns are grouped per *part*: a part begins at each `task_start`, and at a
`session_start` that follows calls of the same task (another attempt), because turn numbers restart
there. Event types this version does not know are kept for the timeline, never refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.trace import events as ev, failures
from mur.trace.fmt import as_int, mean
from mur.trace.redundant import redundant_calls
from mur.trace.timeline import timeline


# a trace without its start or end: a session cut off (kill -9, a full disk) before it wrote them
TRACE_HINT = "the session was cut off before its trace was complete: `mur trace show @2` reads the one before"


def require_session(events: list[dict[str, Any]], source: str = "trace.jsonl") -> None:
    """E-TRC-001 unless the trace holds a session_start and a session_end (every `mur trace` reader)."""
    kinds = {e["event_type"] for e in events}
    if not events:
        raise MurError("E-TRC-001", f"{source}: trace file is empty (incomplete or zero-event session)", TRACE_HINT)
    if ev.SESSION_START not in kinds:
        raise MurError("E-TRC-001", f"{source}: no session_start event found", TRACE_HINT)
    if ev.SESSION_END not in kinds:
        raise MurError("E-TRC-001", f"{source}: no session_end event found (the session did not finish)",
                       hint="a session that is still running, or was killed, has no session_end yet")


def summarize(events: list[dict[str, Any]], source: str = "trace.jsonl") -> dict[str, Any]:
    """The numbers `mur trace show` prints (and `--json` emits)."""
    require_session(events, source)
    starts = [e for e in events if e["event_type"] == ev.SESSION_START]
    ends = [e for e in events if e["event_type"] == ev.SESSION_END]
    first, last = starts[0], ends[-1]
    of = _by_type(events)
    parts = _parts(events)
    turns = as_int(last.get("total_turns"))
    tin, tout = as_int(last.get("total_input_tokens")), as_int(last.get("total_output_tokens"))
    tools, skills, shells = of.get(ev.TOOL_CALL, []), of.get(ev.SKILL_CALL, []), of.get(ev.SHELL, [])
    exit_codes: dict[str, int] = {}
    for shell in shells:
        key = str(as_int(shell.get("exit_code")))
        exit_codes[key] = exit_codes.get(key, 0) + 1
    return {
        "session_id": first.get("session_id"),
        "capsule": first.get("capsule_name"),
        "version": first.get("capsule_version"),
        "model": first.get("model"),
        "status": last.get("exit_status"),
        "duration_ms": sum(as_int(e.get("duration_ms")) for e in ends),
        "attempts": len(starts),
        "capabilities": first.get("capabilities") or [],
        "tools": first.get("tools_declared") or [],
        "containment": {"declared": first.get("containment_declared"), "achieved": first.get("containment_achieved")},
        "workdir_exec": first.get("workdir_exec"),
        "prompt": {"source": first.get("system_prompt_source"), "sha256": first.get("system_prompt_sha256")},
        "turns": {"count": turns, "max": first.get("max_turns"),
                  "decisions": [{"part": parts[id(e)], "turn": as_int(e.get("turn")), "decision": e.get("decision")}
                                for e in of.get(ev.INFERENCE, []) if not e.get("origin")]},
        "tokens": {
            "input": tin, "output": tout, "total": tin + tout,
            "avg_input_per_turn": tin / turns if turns else None,
            "avg_output_per_turn": tout / turns if turns else None,
        },
        "tool_calls": {**_calls(tools), "calls": [
            {"part": parts[id(t)], "turn": as_int(t.get("turn")), "tool_name": t.get("tool_name"),
             "duration_ms": as_int(t.get("duration_ms")), "status": t.get("status"), "input": t.get("input"),
             "error": failures.tool_error(t)} for t in tools]},
        "redundant_calls": redundant_calls(events),
        "skill_calls": {**_calls(skills), "calls": [
            {"part": parts[id(s)], "turn": as_int(s.get("turn")), "skill_name": s.get("skill_name"),
             "duration_ms": as_int(s.get("duration_ms")), "status": s.get("status")} for s in skills]},
        "shell_calls": {"count": len(shells), "exit_codes": exit_codes, "avg_ms": _avg(shells),
                        "failures": _shell_failures(events)},
        "compaction": _pick(of.get(ev.COMPACTION, []), "turn", "tokens_before", "tokens_after"),
        "reopens": _pick(of.get(ev.TASK_REOPENED, []), "task_id", "reopen_number", "hook_name", "reason"),
        "hook_failures": _pick(of.get(ev.HOOK_DISPATCH_ERROR, []), "hook_name", "event", "arm"),
        "tasks": _pick(of.get(ev.TASK_END, []), "task_id", "exit_status", "duration_ms", "turns", "input_tokens",
                       "output_tokens", "tool_calls", "shell_calls", "reopen_count"),
        "timeline": timeline(events),
    }


def _parts(events: list[dict[str, Any]]) -> dict[int, int]:
    """id(event) -> the part it belongs to (see the module doc), counted from 1."""
    part, busy, out = 1, False, {}
    for e in events:
        kind = e["event_type"]
        if kind == ev.TASK_START or (kind == ev.SESSION_START and busy):
            part, busy = (part + 1 if busy else part), False
        elif kind in (ev.INFERENCE, ev.TOOL_CALL, ev.SKILL_CALL):
            busy = True
        out[id(e)] = part
    return out


def _shell_failures(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each shell call that exited non-zero: what its status means, and its stderr tail (the `shell`
    event's, else, from an older trace, what its tool_call's traced output holds)."""
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] = {}
    for e in events:
        if e["event_type"] == ev.SHELL and as_int(e.get("exit_code")) != 0:
            stderr = failures.shell_stderr(e)
            if stderr is None and previous.get("event_type") == ev.TOOL_CALL and "error" not in previous:
                stderr = failures.output_stderr(previous)
            out.append({"turn": e.get("turn"), "binary": e.get("binary"), "exit_code": as_int(e.get("exit_code")),
                        "meaning": failures.exit_meaning(e.get("exit_code")), "stderr_tail": stderr})
        previous = e
    return out


def _calls(events: list[dict[str, Any]]) -> dict[str, Any]:
    ok = sum(1 for e in events if e.get("status") == "ok")
    return {"count": len(events), "ok": ok, "error": len(events) - ok, "avg_ms": _avg(events),
            "success_pct": 100.0 * ok / len(events) if events else None}


def _avg(events: list[dict[str, Any]]) -> int:
    """The mean duration in whole milliseconds (cut, as upstream), 0 without events."""
    average = mean([as_int(e.get("duration_ms")) for e in events])
    return int(average) if average is not None else 0


def _pick(events: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{k: e.get(k) for k in keys} for e in events]


def _by_type(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(e["event_type"], []).append(e)
    return out


def show(selector: str | None, workdir: Path) -> dict[str, Any]:
    """Resolve a session address and summarize its trace (E-TRC-001/002, E-IO-*)."""
    from mur.trace.reader import load_events
    from mur.trace.sessions import resolve_trace

    path = resolve_trace(selector, workdir)
    summary = summarize(load_events(path), str(path))
    summary["trace"] = str(path)
    return summary
