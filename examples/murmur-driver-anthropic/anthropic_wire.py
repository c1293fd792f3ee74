"""Pure translation between the driver wire format and the Anthropic Messages API.

No WIT imports here, so the host's tests can load this module directly. See docs/inference.md for
both formats; the short version:

    wire request  {model, max_tokens, system, messages[user|assistant|tool], tools[{name, description,
                   parameters}], params}
    wire reply    {stop_reason: end_turn|tool_call|max_tokens, content[text|tool_call|thinking], usage}
    wire error    {stop_reason: error, error: <message>, status?, retry_after?, kind}
"""

import json

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_TIMEOUT_MS = 600_000
DEFAULT_THINKING_BUDGET = 1024
THINKING_STRIPPED_PARAMS = ("temperature", "top_p", "top_k")
STOP_REASONS = {"end_turn": "end_turn", "stop_sequence": "end_turn", "tool_use": "tool_call",
                "max_tokens": "max_tokens"}


def parse_config(raw):
    """MURMUR_INFERENCE_DRIVER_CONFIG as a dict ({} when absent or not a JSON object)."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def beta_header(config):
    """The anthropic-beta header value from config.beta_features (string or list), or None."""
    value = config.get("beta_features")
    if isinstance(value, list):
        value = ",".join(str(v).strip() for v in value if str(v).strip())
    return value.strip() if isinstance(value, str) and value.strip() else None


def _thinking(config, max_tokens):
    if str(config.get("thinking", "")).strip().lower() != "enabled":
        return None
    budget = config.get("thinking_budget_tokens", DEFAULT_THINKING_BUDGET)
    budget = budget if isinstance(budget, int) else DEFAULT_THINKING_BUDGET
    return {"type": "enabled", "budget_tokens": max(1, min(budget, max_tokens - 1))}


def _blocks(blocks, thinking_on):
    out = []
    for block in blocks or []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            out.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "tool_call":
            out.append({"type": "tool_use", "id": str(block.get("id", "")), "name": str(block.get("name", "")),
                        "input": block.get("input") or {}})
        elif kind == "thinking" and thinking_on and block.get("signature"):
            out.append({"type": "thinking", "thinking": block.get("text", ""), "signature": block["signature"]})
        elif kind == "image" and isinstance(block.get("source"), dict):
            source = block["source"]
            out.append({"type": "image", "source": {"type": source.get("type") or "base64",
                                                    "media_type": source.get("media_type", ""),
                                                    "data": source.get("data", "")}})
    return out


def to_anthropic_request(payload, config):
    """A wire request -> a non-streaming Messages request body. Raises ValueError when malformed."""
    if not isinstance(payload, dict):
        raise ValueError("payload is not a JSON object")
    model, max_tokens = payload.get("model"), payload.get("max_tokens")
    if not isinstance(model, str) or not isinstance(max_tokens, int):
        raise ValueError("payload needs a string 'model' and an integer 'max_tokens'")
    thinking = _thinking(config, max_tokens)
    messages = []
    for message in payload.get("messages") or []:
        role = message.get("role")
        if role in ("user", "assistant"):
            messages.append({"role": role, "content": _blocks(message.get("content"), thinking is not None)})
        elif role == "tool":
            if not message.get("tool_call_id"):
                raise ValueError("tool message is missing required field 'tool_call_id'")
            text = "".join(b.get("text", "") for b in message.get("content") or [] if b.get("type") == "text")
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"],
                     "content": [{"type": "text", "text": text}]}
            if message.get("is_error"):
                block["is_error"] = True
            # All results answering one assistant turn belong in one user message.
            if messages and messages[-1]["role"] == "user" and all(
                    b.get("type") == "tool_result" for b in messages[-1]["content"]):
                messages[-1]["content"].append(block)
            else:
                messages.append({"role": "user", "content": [block]})
        else:
            raise ValueError(f"unsupported message role '{role}'")
    body = {"model": model, "max_tokens": max_tokens, "messages": messages, "stream": False}
    system = payload.get("system")
    if isinstance(system, str) and system.strip():
        body["system"] = system
    tools = []
    for tool in payload.get("tools") or []:
        mapped = {"name": tool["name"], "input_schema": tool.get("parameters") or {"type": "object", "properties": {}}}
        if str(tool.get("description") or "").strip():
            mapped["description"] = tool["description"].strip()
        tools.append(mapped)
    if tools:
        body["tools"] = tools
    params = payload.get("params") or {}
    if params.get("tool_choice") == "required":
        body["tool_choice"] = {"type": "any"}
    if thinking is not None:
        body["thinking"] = thinking
    for key, value in params.items():
        if key in body or key in ("tool_choice", "stream"):
            continue
        if thinking is not None and key in THINKING_STRIPPED_PARAMS:
            continue
        body[key] = value
    return body


def from_anthropic_response(data):
    """A Messages response -> a wire reply (usage passed through). Raises ValueError when malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise ValueError("response has no content list")
    stop = data.get("stop_reason") or "end_turn"
    if stop not in STOP_REASONS:
        raise ValueError(f"unsupported Anthropic stop_reason '{stop}'")
    content = []
    for block in data["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            content.append({"type": "text", "text": block.get("text", "")})
        elif kind == "tool_use":
            content.append({"type": "tool_call", "id": block.get("id", ""), "name": block.get("name", ""),
                            "input": block.get("input") or {}})
        elif kind == "thinking":
            content.append({"type": "thinking", "text": block.get("thinking", ""),
                            "signature": block.get("signature", "")})
    reply = {"stop_reason": STOP_REASONS[stop], "content": content}
    usage = data.get("usage")
    if isinstance(usage, dict):
        reply["usage"] = {k: v for k, v in usage.items() if isinstance(v, int)}
    return reply


def error_reply(message, *, kind, status=None, retry_after=None):
    reply = {"stop_reason": "error", "error": message, "kind": kind}
    if status is not None:
        reply["status"] = status
    if retry_after is not None:
        reply["retry_after"] = retry_after
    return reply


def transport_error_kind(message):
    """How a host HTTP import refusal/failure classifies: policy | timeout | connection."""
    lowered = message.lower()
    if lowered.startswith("network policy"):
        return "policy"
    if "timeout" in lowered or "timed out" in lowered:
        return "timeout"
    return "connection"


def provider_error_message(status, body):
    """`HTTP <status>` detail: the Anthropic error envelope's type and message, else the body text."""
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else str(body)
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()[:500] or "(empty body)"
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return f"{error.get('type', 'error')}: {error['message']}"
    return text.strip()[:500]


def header(headers, name):
    name = name.lower()
    return next((v for k, v in headers if k.lower() == name), None)
