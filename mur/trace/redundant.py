"""Redundant calls: a tool call that re-reads what an earlier call of the same attempt already read,
with nothing in between that could have changed it (`mur trace show` and `report`, as upstream).

Nothing here knows a tool by name. Each `tool_call` says what it did through what the tool declared
in its result's metadata (mur.session.tools records both keys verbatim):

  state_effect  `read`: it only observed the resource; `mutate`: it changed it. Anything else,
                including nothing, is treated like `mutate`: an undeclared call is never assumed
                harmless, and never flagged itself.
  resource_id   which resource (a path, a symbol, a URL: opaque, compared as is). Empty or absent:
                the first string under one of PATH_FIELDS at the top of the call's `input` (key
                compared case-insensitively). A call with neither is not tracked at all.

A read of a resource whose last tracked call was a read is redundant; it names the turn of that
earlier read. Tracking starts afresh with each attempt (`session_start`) and task (`task_start`):
a new conversation has not seen what the previous one read.
"""

from __future__ import annotations

from typing import Any

from mur.trace import events as ev
from mur.trace.fmt import as_int

PATH_FIELDS = ("path", "file", "file_path", "filepath", "filename")
READ = "read"  # a call's declared state_effect ("read" or "mutate")


def resource_of(call: dict[str, Any]) -> str | None:
    """The resource a tool call addressed: its declared `resource_id`, else a path in its input."""
    declared = call.get("resource_id")
    if isinstance(declared, str) and declared:
        return declared
    given = call.get("input")
    if not isinstance(given, dict):
        return None
    for name in PATH_FIELDS:
        for key, value in given.items():
            if isinstance(key, str) and key.lower() == name and isinstance(value, str):
                return value
    return None


def redundant_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each redundant read, in file order: {turn, tool_name, resource, prior_turn}."""
    last_read: dict[str, int] = {}
    found: list[dict[str, Any]] = []
    for event in events:
        kind = event["event_type"]
        if kind in (ev.SESSION_START, ev.TASK_START):
            last_read.clear()
            continue
        if kind != ev.TOOL_CALL:
            continue
        resource = resource_of(event)
        if resource is None:
            continue
        turn = as_int(event.get("turn"))
        if event.get("state_effect") != READ:
            last_read.pop(resource, None)
            continue
        if resource in last_read:
            found.append({"turn": turn, "tool_name": str(event.get("tool_name")), "resource": resource,
                          "prior_turn": last_read[resource]})
        last_read[resource] = turn
    return found
