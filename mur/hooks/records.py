"""trace.jsonl events -> murmur:hook/lifecycle@0.5.0 calls, and hook-output values back.

`lifecycle_call(event)` is pure data: it names the lifecycle function a trace event maps to and the
record's fields (WIT kebab-case names, plain Python values), or None for events hooks never see
(hook_dispatch_error, task_reopened, network_denied, a2a_*, skill_call, compaction, and every
`inference` event with an `origin` — a hook's own run-inference call or the built-in compactor's,
so a hook asking for a completion is never re-entered through on-inference). `to_record` turns the
fields into the wasmtime `Record` the component call takes.

| trace event   | function         | record                                                         |
|---------------|------------------|----------------------------------------------------------------|
| session_start | on-session-start | session-context {capsule-name, capsule-version, session-id,    |
|               |                  | model, capabilities}                                           |
| task_start    | on-task-start    | task-start-event {task-id, context-id, source, input-bytes}    |
| inference     | on-inference     | inference-event {turn, input-tokens, output-tokens, decision,  |
|               |                  | tool-name; prompt/output/tools = none}                         |
| tool_call     | on-tool-call     | tool-event {turn, tool-name, input-bytes, output-bytes, ...}   |
| shell         | on-shell         | shell-event {turn, binary, command (first 200 chars), ...}     |
| task_end      | on-task-end      | task-end-event {task-id, exit-status}                          |
| session_end   | on-session-end   | session-end-event {total-*, duration-ms, exit-status}          |

The trace records no shell stdout/stderr text (only byte counts), so `stdout`/`stderr` are the
event's own `stdout`/`stderr` keys when a caller supplies them, else "".
"""

from __future__ import annotations

import shlex
from typing import Any

from mur.trace import events as ev

U32 = 2**32 - 1
U64 = 2**64 - 1
COMMAND_LIMIT = 200


def _u(value: Any, limit: int = U64) -> int:
    try:
        number = int(value or 0)
    except (TypeError, ValueError):
        return 0
    return min(max(number, 0), limit)


def _s32(value: Any) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return -1
    return max(min(number, 2**31 - 1), -(2**31))


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _opt(value: Any) -> str | None:
    return None if value is None else str(value)


def _command(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = shlex.join(str(v) for v in value)
    return _str(value)[:COMMAND_LIMIT]


def lifecycle_call(event: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(WIT function, record fields) for a trace event, or None when hooks do not see it."""
    kind = event.get("event_type")
    if kind == ev.SESSION_START:
        return "on-session-start", {
            "capsule-name": _str(event.get("capsule_name")),
            "capsule-version": _str(event.get("capsule_version")),
            "session-id": _str(event.get("session_id")),
            "model": _str(event.get("model")),
            "capabilities": [str(c) for c in event.get("capabilities") or []],
        }
    if kind == ev.TASK_START:
        return "on-task-start", {
            "task-id": _str(event.get("task_id")),
            "context-id": _str(event.get("context_id")),
            "source": _str(event.get("source")),
            "input-bytes": _u(event.get("message_parts_bytes", event.get("input_bytes"))),
        }
    if kind == ev.INFERENCE:
        if event.get("origin"):
            return None
        return "on-inference", {
            "turn": _u(event.get("turn"), U32),
            "input-tokens": _u(event.get("input_tokens")),
            "output-tokens": _u(event.get("output_tokens")),
            "decision": _str(event.get("decision")),
            "tool-name": _opt(event.get("tool_name")),
            "prompt": _opt(event.get("prompt")),
            "output": _opt(event.get("output")),
            "tools": _opt(event.get("tools")),
        }
    if kind == ev.TOOL_CALL:
        return "on-tool-call", {
            "turn": _u(event.get("turn"), U32),
            "tool-name": _str(event.get("tool_name")),
            "input-bytes": _u(event.get("input_bytes")),
            "output-bytes": _u(event.get("output_bytes")),
            "duration-ms": _u(event.get("duration_ms")),
            "status": _str(event.get("status")),
        }
    if kind == ev.SHELL:
        return "on-shell", {
            "turn": _u(event.get("turn"), U32),
            "binary": _str(event.get("binary")),
            "command": _command(event.get("command")),
            "exit-code": _s32(event.get("exit_code")),
            "stdout": _str(event.get("stdout")),
            "stderr": _str(event.get("stderr")),
            "stdout-bytes": _u(event.get("stdout_bytes")),
            "stderr-bytes": _u(event.get("stderr_bytes")),
            "duration-ms": _u(event.get("duration_ms")),
        }
    if kind == ev.TASK_END:
        return "on-task-end", {"task-id": _str(event.get("task_id")), "exit-status": _str(event.get("exit_status"))}
    if kind == ev.SESSION_END:
        return "on-session-end", {
            "total-turns": _u(event.get("total_turns"), U32),
            "total-input-tokens": _u(event.get("total_input_tokens")),
            "total-output-tokens": _u(event.get("total_output_tokens")),
            "total-tool-calls": _u(event.get("total_tool_calls"), U32),
            "total-shell-calls": _u(event.get("total_shell_calls"), U32),
            "duration-ms": _u(event.get("duration_ms")),
            "exit-status": _str(event.get("exit_status")),
        }
    return None


def stage_fields(shell_allow: list[str]) -> dict[str, Any]:
    return {"shell-allow": [str(b) for b in shell_allow]}


def message_text(content: Any) -> str:
    """A conversation message's content as the plain string the WIT `message` record carries."""
    import json

    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(_str(block.get("text")))
        elif kind == "tool_use":
            parts.append(f"[tool_use {block.get('name')}] {json.dumps(block.get('input', {}), ensure_ascii=False)}")
        elif kind == "tool_result":
            inner = block.get("content")
            text = inner if isinstance(inner, str) else message_text(inner or [])
            parts.append(f"[tool_result{' (error)' if block.get('is_error') else ''}] {text}")
    return "\n".join(parts)


def compaction_fields(messages: list[dict[str, Any]], session_tokens: int, threshold: float,
                      model: str | None, system_prompt: str | None) -> dict[str, Any]:
    return {
        "messages": [{"role": _str(m.get("role")), "content": message_text(m.get("content"))} for m in messages],
        "session-tokens": _u(session_tokens),
        "threshold": float(threshold),
        "model": _opt(model),
        "system-prompt": _opt(system_prompt),
    }


def to_record(fields: dict[str, Any]) -> Any:
    """Plain fields (nested dicts for nested records) -> a wasmtime component Record."""
    from wasmtime.component import Record

    rec = Record()
    for name, value in fields.items():
        setattr(rec, name, _convert(value))
    return rec


def _convert(value: Any) -> Any:
    if isinstance(value, dict):
        return to_record(value)
    if isinstance(value, list):
        return [_convert(v) for v in value]
    return value


def output_of(value: Any) -> tuple[str | None, Any, str | None]:
    """A lifted `result<hook-output, string>` -> (arm tag or None for `none`, payload, error)."""
    if isinstance(value, str):
        return None, None, value
    tag = getattr(value, "tag", None)
    if tag is None and value is None:
        return None, None, None
    if tag in (None, "none"):
        return None, None, None
    return str(tag), getattr(value, "payload", None), None


def messages_of(payload: Any) -> list[dict[str, str]]:
    """replace-context payload (list<message>) -> [{"role", "content"}]."""
    out = []
    for item in payload or []:
        out.append({"role": _str(getattr(item, "role", None)), "content": _str(getattr(item, "content", None))})
    return out


def manifests_of(payload: Any) -> list[tuple[str, str]]:
    """write-manifests payload (list<tool-manifest>) -> [(binary_name, content)]."""
    return [(_str(getattr(item, "binary-name", None)), _str(getattr(item, "content", None))) for item in payload or []]
