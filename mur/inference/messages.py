"""Anthropic Messages shapes and the driver wire format, and conversions between them.

The agent loop speaks the Anthropic Messages API (request: model, max_tokens, system, messages,
tools; response: content blocks, stop_reason, usage). A ``runtime: driver`` component speaks
upstream's provider-neutral *driver wire format* in ``tool-input.data`` / ``tool-result.data``:

Request (host -> driver)::

    {"model": "...", "max_tokens": 8192, "system": "...", "params": {},
     "tools": [{"name", "description", "parameters": <JSON schema>}],
     "messages": [
        {"role": "user",      "content": [{"type": "text", "text": "..."}]},
        {"role": "assistant", "content": [{"type": "text", ...},
                                          {"type": "tool_call", "id", "name", "input"}]},
        {"role": "tool", "tool_call_id": "...", "is_error": false,
         "content": [{"type": "text", "text": "..."}]}]}

Reply (driver -> host)::

    {"stop_reason": "end_turn" | "tool_call" | "max_tokens",
     "content": [{"type": "text", ...}, {"type": "tool_call", "id", "name", "input"}],
     "usage": {"input_tokens": N, "output_tokens": N}}          # usage: mur's addition
    {"stop_reason": "error", "error": "<provider message>",
     "status": 429, "retry_after": "2", "kind": "http"}         # status/retry_after/kind: mur's

mur's additions are optional fields an upstream driver simply does not send; without ``usage`` the
host estimates tokens (:func:`estimate_tokens`).
"""

from __future__ import annotations

import json
from typing import Any

# -- Anthropic helpers -------------------------------------------------------------------------


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def user_text(text: str) -> dict[str, Any]:
    """A user message holding one text block."""
    return {"role": "user", "content": [text_block(text)]}


def tool_result_block(tool_use_id: str, content: str, is_error: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id,
                             "content": [text_block(content)]}
    if is_error:
        block["is_error"] = True
    return block


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (a bare string becomes one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [text_block(content)]
    return [b for b in content or [] if isinstance(b, dict)]


def text_of(blocks: list[dict[str, Any]]) -> str:
    """The concatenated text of the text blocks."""
    return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")


def tool_uses(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [b for b in blocks if b.get("type") == "tool_use"]


def estimate_tokens(value: Any) -> int:
    """A rough token count (UTF-8 bytes / 4) for when a provider reports no usage."""
    data = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(data.encode("utf-8")) // 4)


def usage_of(response: dict[str, Any]) -> tuple[int, int]:
    """(input_tokens, output_tokens) of a Messages response; cache reads count as input."""
    usage = response.get("usage") or {}

    def num(key: str) -> int:
        value = usage.get(key)
        return int(value) if isinstance(value, (int, float)) else 0

    return (num("input_tokens") + num("cache_read_input_tokens") + num("cache_creation_input_tokens"),
            num("output_tokens"))


# -- Anthropic request -> driver wire request --------------------------------------------------


def _to_wire_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    wire: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            wire.append(text_block(block.get("text", "")))
        elif kind == "tool_use":
            wire.append({"type": "tool_call", "id": block.get("id", ""), "name": block.get("name", ""),
                         "input": block.get("input") or {}})
        elif kind == "thinking":
            wire.append({"type": "thinking", "text": block.get("thinking", ""),
                         "signature": block.get("signature", "")})
        elif kind == "image":
            wire.append({"type": "image", "source": block.get("source", {})})
    return wire


def _tool_result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return text_of([b for b in content or [] if isinstance(b, dict)])


def to_wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic messages -> driver wire messages (tool results become `tool` messages)."""
    wire: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        blocks = blocks_of(message)
        if role == "user":
            rest = []
            for block in blocks:
                if block.get("type") == "tool_result":
                    wire.append({"role": "tool", "tool_call_id": block.get("tool_use_id", ""),
                                 "is_error": bool(block.get("is_error")),
                                 "content": [text_block(_tool_result_text(block))]})
                else:
                    rest.append(block)
            if rest:
                wire.append({"role": "user", "content": _to_wire_blocks(rest)})
        else:
            wire.append({"role": "assistant", "content": _to_wire_blocks(blocks)})
    return wire


def to_driver_payload(request: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic Messages request -> the driver wire payload (upstream's field order)."""
    payload: dict[str, Any] = {
        "model": request["model"],
        "max_tokens": request["max_tokens"],
        "messages": to_wire_messages(request.get("messages", [])),
        "tools": [
            {"name": t["name"], "description": t.get("description", ""),
             "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}
            for t in request.get("tools", [])
        ],
        "params": dict(request.get("params") or {}),
    }
    if request.get("system") is not None:
        payload["system"] = request["system"]
    return payload


# -- driver wire reply -> Anthropic response ---------------------------------------------------

_STOP_FROM_WIRE = {"tool_call": "tool_use", "end_turn": "end_turn", "max_tokens": "max_tokens"}


def from_driver_reply(reply: dict[str, Any]) -> dict[str, Any]:
    """A successful driver reply -> an Anthropic-shaped response (usage only when the driver sent it)."""
    content: list[dict[str, Any]] = []
    for block in reply.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            content.append(text_block(str(block.get("text", ""))))
        elif kind == "tool_call":
            content.append({"type": "tool_use", "id": str(block.get("id", "")),
                            "name": str(block.get("name", "")), "input": block.get("input") or {}})
        elif kind == "thinking":
            content.append({"type": "thinking", "thinking": block.get("text", ""),
                            "signature": block.get("signature", "")})
    stop = str(reply.get("stop_reason", ""))
    response: dict[str, Any] = {"type": "message", "role": "assistant", "content": content,
                                "stop_reason": _STOP_FROM_WIRE.get(stop, stop)}
    if isinstance(reply.get("usage"), dict):
        response["usage"] = reply["usage"]
    return response
