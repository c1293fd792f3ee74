"""`mur trace show`: a session's trace.jsonl as a summary plus a readable timeline.

The summary sections follow upstream's `mur trace show` (Session, Turns, Tokens, Tool calls, Skill
calls, Shell calls, Compaction, and Tasks when more than one task ran); a Timeline section then lists
every event with its offset from the first one. A trace needs a `session_start` and a
`session_end` (E-TRC-001 otherwise, as upstream); a line that is not a JSON object is E-TRC-001 too.
Event types this version does not know are listed generically, never refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.humanize import plain
from mur.trace import events as ev, failures
from mur.trace.reader import load_events

RULE_WIDTH = 49
INPUT_LIMIT = 120
_COMMON = ("event_type", "session_id", "timestamp")


def summarize(events: list[dict[str, Any]], source: str = "trace.jsonl") -> dict[str, Any]:
    """The numbers `mur trace show` prints (and `--json` emits)."""
    require_session(events, source)
    starts = [e for e in events if e["event_type"] == ev.SESSION_START]
    ends = [e for e in events if e["event_type"] == ev.SESSION_END]
    first, last = starts[0], ends[-1]
    of = _by_type(events)
    tools = of.get(ev.TOOL_CALL, [])
    skills = of.get(ev.SKILL_CALL, [])
    shells = of.get(ev.SHELL, [])
    exit_codes: dict[str, int] = {}
    for shell in shells:
        key = str(shell.get("exit_code"))
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
        "turns": {"count": as_int(last.get("total_turns")), "max": first.get("max_turns")},
        "tokens": {
            "input": as_int(last.get("total_input_tokens")),
            "output": as_int(last.get("total_output_tokens")),
            "total": as_int(last.get("total_input_tokens")) + as_int(last.get("total_output_tokens")),
        },
        "tool_calls": {**_calls(tools), "calls": [
            {"turn": t.get("turn"), "tool_name": t.get("tool_name"), "duration_ms": t.get("duration_ms"),
             "status": t.get("status"), "input": t.get("input"), "error": failures.tool_error(t)} for t in tools]},
        "skill_calls": _calls(skills),
        "shell_calls": {"count": len(shells), "exit_codes": exit_codes, "avg_ms": _avg(shells),
                        "failures": _shell_failures(events)},
        "compaction": _pick(of.get(ev.COMPACTION, []), "turn", "tokens_before", "tokens_after"),
        "hook_failures": _pick(of.get(ev.HOOK_DISPATCH_ERROR, []), "hook_name", "event", "arm"),
        "tasks": _pick(of.get(ev.TASK_END, []), "task_id", "exit_status", "duration_ms", "turns", "input_tokens",
                       "output_tokens", "reopen_count"),
        "timeline": timeline(events),
    }


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


def require_session(events: list[dict[str, Any]], source: str = "trace.jsonl") -> None:
    """E-TRC-001 unless the trace holds a session_start and a session_end (every `mur trace` reader)."""
    kinds = {e["event_type"] for e in events}
    if not events:
        raise MurError("E-TRC-001", f"{source}: trace file is empty (incomplete or zero-event session)")
    if ev.SESSION_START not in kinds:
        raise MurError("E-TRC-001", f"{source} has no session_start event")
    if ev.SESSION_END not in kinds:
        raise MurError("E-TRC-001", f"{source} has no session_end event (the session did not finish)",
                       hint="a session that is still running, or was killed, has no session_end yet")


def timeline(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per event: offset from the first event (ms), type, turn, and a one-line description."""
    if not events:
        return []
    origin = min(as_int(e.get("timestamp")) for e in events)
    return [
        {"offset_ms": as_int(e.get("timestamp")) - origin, "event_type": e["event_type"], "turn": e.get("turn"),
         "text": _describe(e)}
        for e in events
    ]


def render(summary: dict[str, Any]) -> str:
    """The human report."""
    out: list[str] = []
    s = summary
    section = _section(out)
    section("Session")
    prompt = s["prompt"]
    digest = f"  {prompt['sha256'][:12]}…" if prompt["sha256"] else ""
    out.extend(labelled([
        ("session", plain(s["session_id"])),
        ("capsule", f"{plain(s['capsule'])} v{plain(s['version'])}"),
        ("model", plain(s["model"])),
        ("status", plain(s["status"])),
        ("duration", fmt_ms(s["duration_ms"])),
        ("capabilities", plain(s["capabilities"])),
        ("tools", plain(s["tools"])),
        ("containment", f"{plain(s['containment']['declared'])} → {plain(s['containment']['achieved'])}"),
        ("workdir exec", plain(bool(s["workdir_exec"]))),
        ("prompt", f"{prompt['source'] or 'none'}{digest}"),
    ]))
    if s["hook_failures"]:
        section("Hook failures")
        out.extend(f"✗ {h['hook_name']} {h['event']} {h['arm']}" for h in s["hook_failures"])
    section("Turns")
    out.append(f"count:      {s['turns']['count']}  (max: {s['turns']['max']})")
    section("Tokens")
    turns = max(s["turns"]["count"], 1)
    tok = s["tokens"]
    out.append(f"input:      {tok['input']:,}  (avg {tok['input'] // turns}/turn)")
    out.append(f"output:     {tok['output']:,}  (avg {tok['output'] // turns}/turn)")
    out.append(f"total:      {tok['total']:,}")
    section("Tool calls")
    tc = s["tool_calls"]
    out.append(_calls_line(tc))
    if tc["count"]:
        out.append(f"latency:    avg {tc['avg_ms']}ms")
    for call in tc["calls"]:
        out.append(f"  turn {call['turn']}  {call['tool_name']} {as_int(call['duration_ms'])}ms "
                   f"{'✓' if call['status'] == 'ok' else '✗'}" + fmt_input(call.get("input")))
        if call.get("error"):
            out.append(f"      error: {call['error']}")
    section("Skill calls")
    out.append(_calls_line(s["skill_calls"]))
    section("Shell calls")
    sc = s["shell_calls"]
    out.append(f"count:      {sc['count']}")
    if sc["count"]:
        codes = ", ".join(f"{n} {'ok' if code == '0' else 'exit ' + code}"
                          for code, n in sorted(sc["exit_codes"].items()))
        out.append(f"exit codes: {codes}")
        out.append(f"latency:    avg {sc['avg_ms']}ms")
    for f in sc.get("failures", []):
        meaning = f": {f['meaning']}" if f.get("meaning") else ""
        out.append(f"  turn {f['turn']}  {plain(f['binary'])}  exit {f['exit_code']}{meaning}")
        for line in (f.get("stderr_tail") or "").split("\n") if f.get("stderr_tail") else []:
            out.append(f"      {line}")
    section("Compaction")
    if not s["compaction"]:
        out.append("fired:      no")
    for c in s["compaction"]:
        before, after = as_int(c["tokens_before"]), as_int(c["tokens_after"])
        out.append(f"fired:      turn {c['turn']}  {before:,} → {after:,} tokens")
    if len(s["tasks"]) > 1:
        section("Tasks")
        for i, t in enumerate(s["tasks"], start=1):
            task_id = str(t.get("task_id") or "")
            short = task_id[4:12] if task_id.startswith("tsk_") else task_id[:8]
            out.append(f"task {i}  {short}  turns: {t.get('turns')}  in: {t.get('input_tokens')}  "
                       f"out: {t.get('output_tokens')}  {t.get('exit_status')}  {fmt_ms(t.get('duration_ms'))}")
    section("Timeline")
    rows = [(f"+{row['offset_ms']:,}ms", str(row["event_type"]), row["text"]) for row in s["timeline"]]
    stamp_width = max((len(r[0]) for r in rows), default=0)
    type_width = max((len(r[1]) for r in rows), default=0)
    out.extend(f"{stamp:<{stamp_width}}  {kind:<{type_width}}  {text}".rstrip() for stamp, kind, text in rows)
    return "\n".join(out) + "\n"


def labelled(pairs: list[tuple[str, str]]) -> list[str]:
    """`label:  value` lines with the values in one column."""
    width = max(len(label) for label, _ in pairs) + 1
    return [f"{label + ':':<{width}}  {value}" for label, value in pairs]


# --- helpers -----------------------------------------------------------------------------------------


def _describe(e: dict[str, Any]) -> str:
    kind = e["event_type"]

    def v(key: str) -> str:
        return plain(e.get(key))

    turn = f"turn {e['turn']}  " if e.get("turn") is not None else ""
    if kind == ev.SESSION_START:
        return (f"{v('capsule_name')} v{v('capsule_version')}  model {v('model')}  "
                f"containment {v('containment_declared')} → {v('containment_achieved')}")
    if kind == ev.SESSION_END:
        return (f"{v('exit_status')}  turns {as_int(e.get('total_turns'))}  "
                f"in {as_int(e.get('total_input_tokens'))}  out {as_int(e.get('total_output_tokens'))}  "
                f"{fmt_ms(e.get('duration_ms'))}")
    if kind == ev.INFERENCE:
        decision = v("decision")
        if e.get("tool_name"):
            decision += f" → {e['tool_name']}"
        origin = f"  ({e['origin']})" if e.get("origin") else ""
        return f"{turn}{decision}  in {as_int(e.get('input_tokens'))}  out {as_int(e.get('output_tokens'))}{origin}"
    if kind == ev.TOOL_CALL:
        mark = "✓" if e.get("status") == "ok" else "✗"
        why = failures.tool_error(e)
        return (f"{turn}{v('tool_name')}  {fmt_ms(e.get('duration_ms'))}  {mark}" + (f" {why}" if why else "")
                + fmt_input(e.get("input")))
    if kind == ev.SKILL_CALL:
        mark = "✓" if e.get("status") == "ok" else "✗"
        return f"{turn}{v('skill_name')}  {fmt_ms(e.get('duration_ms'))}  {mark}"
    if kind == ev.SHELL:
        command = str(e.get("command") or "")
        command = command if len(command) <= 80 else command[:79] + "…"
        limit = f"  limit {e['resource_limit']}" if e.get("resource_limit") else ""
        return f"{turn}{v('binary')}  exit {v('exit_code')}  {fmt_ms(e.get('duration_ms'))}{limit}  {command}"
    if kind == ev.COMPACTION:
        return f"{turn}{as_int(e.get('tokens_before')):,} → {as_int(e.get('tokens_after')):,} tokens"
    if kind == ev.TASK_START:
        return f"{v('task_id')}  ({v('source')})"
    if kind == ev.TASK_END:
        return f"{v('task_id')}  {v('exit_status')}  {fmt_ms(e.get('duration_ms'))}"
    if kind == ev.A2A_TASK_RECEIVED:
        parent = f"  traceparent {e['traceparent_from_caller']}" if e.get("traceparent_from_caller") else ""
        return f"{v('task_id')}  context {v('context_id')}{parent}"
    if kind == ev.NETWORK_DENIED:
        return f"{turn}{v('artifact')}  {v('method')} {v('url')}  {v('reason')}"
    if kind == ev.HOOK_DISPATCH_ERROR:
        return f"{v('hook_name')}  {v('event')}  {v('arm')}"
    if kind == ev.TASK_REOPENED:
        return f"{v('task_id')}  reopen {v('reopen_number')} by {v('hook_name')}: {v('reason')}"
    # A type newer than this version: its scalar fields, the ones it has.
    fields = [f"{key}={plain(value)}" for key, value in e.items()
              if key not in _COMMON and key != "turn" and value is not None and _scalar(value)]
    return turn + "  ".join(fields)


def heading(title: str) -> str:
    """`── Title ─────…`, the section rule every `mur trace` report uses."""
    head = f"── {title} "
    return head + "─" * max(RULE_WIDTH - len(head), 3)


def _section(out: list[str]):
    def add(title: str) -> None:
        if out:
            out.append("")
        out.append(heading(title))

    return add


def _calls(events: list[dict[str, Any]]) -> dict[str, Any]:
    ok = sum(1 for e in events if e.get("status") == "ok")
    return {"count": len(events), "ok": ok, "error": len(events) - ok, "avg_ms": _avg(events)}


def _calls_line(calls: dict[str, Any]) -> str:
    if not calls["count"]:
        return "count:      0"
    rate = 100.0 * calls["ok"] / calls["count"]
    return f"count:      {calls['count']}  ({calls['ok']} ok, {calls['error']} error)  success {rate:.1f}%"


def _avg(events: list[dict[str, Any]]) -> int:
    return sum(as_int(e.get("duration_ms")) for e in events) // len(events) if events else 0


def fmt_input(value: Any, limit: int = INPUT_LIMIT) -> str:
    """`  <compact JSON>` cut to `limit` characters with `…`, or "" for no value."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return "  " + (text if len(text) <= limit else text[: limit - 1] + "…")


def _pick(events: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    return [{k: e.get(k) for k in keys} for e in events]


def _by_type(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(e["event_type"], []).append(e)
    return out


def fmt_ms(ms: Any) -> str:
    """A millisecond count for people: 70ms, 1.2s, 2m05s."""
    ms = as_int(ms)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    return f"{ms // 60_000}m{(ms % 60_000) // 1000:02d}s"


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def as_int(value: Any) -> int:
    """`value` as an int, 0 when it is missing or not a number (trace fields are never trusted)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # json.loads reads Infinity/NaN
        return 0


def show(selector: str | None, workdir: Path) -> dict[str, Any]:
    """Resolve a session address and summarize its trace (E-TRC-001/002, E-IO-*)."""
    from mur.trace.sessions import resolve_trace

    path = resolve_trace(selector, workdir)
    summary = summarize(load_events(path), str(path))
    summary["trace"] = str(path)
    return summary
