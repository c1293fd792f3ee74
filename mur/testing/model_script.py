"""The reply script a loopback model server replays: one scripted reply per model request.

A script is a YAML or JSON list. Each entry answers one ``POST /v1/messages``, in order:

    - text: "Looking around."          # an assistant text block (stop_reason end_turn)
      usage: {input_tokens: 120, output_tokens: 9}
    - tool_use: {name: bash, input: {command: "ls"}}   # stop_reason tool_use (text optional)
    - error: {status: 429, message: "slow down", retry_after: 1}   # an Anthropic error body
    - delay: 2.5                        # seconds to wait before answering (with any reply kind)
      text: "late"
    - malformed: true                   # HTTP 200 whose body is not valid JSON
    - text: "again"
      repeat: 3                         # the same reply three times in a row

Optional keys on a normal reply: ``stop_reason`` (override, e.g. ``max_tokens``), ``usage``
(defaults: input = request bytes / 4, output = reply text bytes / 4, both at least 1), ``id``
(message id), ``model``. ``tool_use`` may be a list of calls; each call may carry its own ``id``.
An ``error`` may give ``body`` (sent verbatim, JSON or text) instead of ``type``/``message``.

When the script runs out the server answers 500 ``script exhausted`` so a test sees the overrun.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mur.errors import MurError

# Anthropic's error `type` for each status, used when an entry gives only a status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}

_KINDS = ("text", "tool_use", "error", "malformed")
_KNOWN = set(_KINDS) | {"delay", "usage", "stop_reason", "id", "model", "repeat"}


@dataclass
class ToolCall:
    name: str
    input: dict[str, Any]
    id: str | None = None


@dataclass
class ScriptedError:
    status: int
    type: str
    message: str
    retry_after: str | None = None
    body: str | None = None  # verbatim body, when given

    def render_body(self) -> bytes:
        """The response body: verbatim `body`, else Anthropic's error envelope."""
        if self.body is not None:
            return self.body.encode()
        envelope = {"type": "error", "error": {"type": self.type, "message": self.message}}
        return json.dumps(envelope).encode()


@dataclass
class Reply:
    """One scripted reply (already expanded from `repeat`)."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    error: ScriptedError | None = None
    malformed: str | None = None
    delay: float = 0.0
    usage: dict[str, int] | None = None
    stop_reason: str | None = None
    id: str | None = None
    model: str | None = None

    @property
    def kind(self) -> str:
        if self.error is not None:
            return "error"
        if self.malformed is not None:
            return "malformed"
        return "tool_use" if self.tool_calls else "text"


def _bad(index: int, reason: str) -> MurError:
    return MurError("E-IO-003", f"reply script entry {index}: {reason}")


def _parse_tool_calls(index: int, value: Any) -> list[ToolCall]:
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise _bad(index, "tool_use needs a mapping with a string 'name'")
        args = item.get("input", {})
        if not isinstance(args, dict):
            raise _bad(index, "tool_use.input must be a mapping")
        call_id = item.get("id")
        calls.append(ToolCall(name=item["name"], input=args, id=str(call_id) if call_id else None))
    return calls


def _parse_error(index: int, value: Any) -> ScriptedError:
    if isinstance(value, int):
        value = {"status": value}
    if not isinstance(value, dict) or not isinstance(value.get("status"), int):
        raise _bad(index, "error needs an integer 'status'")
    status = value["status"]
    retry_after = value.get("retry_after")
    body = value.get("body")
    if body is not None and not isinstance(body, str):
        body = json.dumps(body)
    return ScriptedError(
        status=status,
        type=str(value.get("type") or ERROR_TYPES.get(status, "api_error")),
        message=str(value.get("message") or f"scripted error {status}"),
        retry_after=None if retry_after is None else str(retry_after),
        body=body,
    )


def parse_entry(index: int, raw: Any) -> list[Reply]:
    """One script entry -> its replies (several when `repeat` is set)."""
    if isinstance(raw, str):
        raw = {"text": raw}
    if not isinstance(raw, dict):
        raise _bad(index, f"expected a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _KNOWN
    if unknown:
        raise _bad(index, f"unknown key(s): {', '.join(sorted(unknown))}")
    if not any(k in raw for k in _KINDS) and "delay" not in raw:
        raise _bad(index, "needs one of text, tool_use, error, malformed")
    reply = Reply(delay=float(raw.get("delay", 0.0)))
    if "text" in raw:
        reply.text = str(raw["text"])
    if "tool_use" in raw:
        reply.tool_calls = _parse_tool_calls(index, raw["tool_use"])
    if "error" in raw:
        reply.error = _parse_error(index, raw["error"])
    if raw.get("malformed"):
        value = raw["malformed"]
        reply.malformed = value if isinstance(value, str) else '{"id": "msg_broken", "content": [{"type": "te'
    if reply.text is None and not reply.tool_calls and reply.error is None and reply.malformed is None:
        reply.text = ""
    usage = raw.get("usage")
    if usage is not None:
        if not isinstance(usage, dict) or not all(isinstance(v, int) for v in usage.values()):
            raise _bad(index, "usage must map token kinds to integers")
        reply.usage = {str(k): int(v) for k, v in usage.items()}
    reply.stop_reason = raw.get("stop_reason")
    reply.id = raw.get("id")
    reply.model = raw.get("model")
    repeat = raw.get("repeat", 1)
    if not isinstance(repeat, int) or repeat < 1:
        raise _bad(index, "repeat must be a positive integer")
    return [reply] + [
        Reply(**{**reply.__dict__, "id": None}) for _ in range(repeat - 1)
    ]


def parse_script(entries: Any) -> list[Reply]:
    """A parsed script (a list of entries) -> the flat list of replies."""
    if isinstance(entries, dict) and "replies" in entries:
        entries = entries["replies"]
    if not isinstance(entries, list):
        raise MurError("E-IO-003", "reply script must be a list of replies")
    replies: list[Reply] = []
    for index, raw in enumerate(entries):
        replies.extend(parse_entry(index, raw))
    return replies


def load_script(path: str | Path) -> list[Reply]:
    """Read a YAML or JSON reply script file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MurError("E-IO-001", f"reply script not readable: {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as exc:
        raise MurError("E-IO-003", f"reply script {path} is not valid YAML/JSON: {exc}") from exc
    return parse_script(data)
