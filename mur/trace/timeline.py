"""The Timeline of `mur trace show`: every event of a trace on one line, offset from the first one.

Event types this version does not know are listed with their scalar fields, never refused.
"""

from __future__ import annotations

from typing import Any

from mur.humanize import plain
from mur.trace import events as ev, failures
from mur.trace.fmt import as_int, fmt_input, fmt_ms

_COMMON = ("event_type", "session_id", "timestamp")


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


def render_rows(rows: list[dict[str, Any]]) -> list[str]:
    """The rows as aligned lines: `+57ms  tool_call  turn 0  greet  24ms  ✓  {...}`."""
    cells = [(f"+{row['offset_ms']:,}ms", str(row["event_type"]), row["text"]) for row in rows]
    stamp_width = max((len(c[0]) for c in cells), default=0)
    type_width = max((len(c[1]) for c in cells), default=0)
    return [f"{stamp:<{stamp_width}}  {kind:<{type_width}}  {text}".rstrip() for stamp, kind, text in cells]


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


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))
