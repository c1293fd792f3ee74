"""JSON-RPC 2.0 envelopes, A2A message parsing, and the wire shapes the door answers with.

Method names and shapes are upstream's (A2A 0.3 names: ``message/send``, ``tasks/get``,
``message/stream``, plus murmur's ``stream/watch``). Where the current A2A spec wants more than
upstream sends, fields are *added*, never renamed, so both upstream clients and the ``a2a-sdk``
client parse the same answers (docs/a2a.md, "Reconciliation with the A2A spec").
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass
from typing import Any

from mur.a2a.auth import SECURITY, SECURITY_SCHEMES
from mur.a2a.tasks import COMPLETED, INPUT_REQUIRED, Task

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002  # A2A's TaskNotCancelableError
# murmur's own, in JSON-RPC's implementation-defined server range (-32000..-32099):
UNAUTHORIZED = -32030  # with HTTP 401: no or wrong bearer token
SERVER_BUSY = -32031  # with HTTP 503: the open-stream cap is reached

MAX_BODY = 1024 * 1024  # bytes; larger bodies get HTTP 413 with a JSON-RPC error

METHODS = ("message/send", "message/stream", "stream/watch", "tasks/get", "tasks/cancel")
TASK_STARTING = ("message/send", "message/stream")

PROTOCOL_VERSION = "0.3.0"
TEXT_MODE = "text/plain"

# A context id names a directory (contexts/<contextId>/history.json), so it is held to a safe
# alphabet: ours are ctx_<32hex>, a2a-sdk sends UUIDs.
_CONTEXT_ID = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")


class RpcError(Exception):
    """A JSON-RPC error answer: ``code``, ``message`` and the request ``id`` (None if unknown)."""

    def __init__(self, code: int, message: str, request_id: Any = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


@dataclass
class RpcRequest:
    id: Any
    method: str
    params: dict


def ok(request_id: Any, result: Any) -> dict:
    """A JSON-RPC success envelope."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(request_id: Any, code: int, message: str) -> dict:
    """A JSON-RPC error envelope."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


# Request ids (JSON-RPC 2.0 section 4: a string, a number or null). A number must be an integer a
# JavaScript client can hold exactly; a string is bounded so an answer never echoes megabytes.
MAX_SAFE_ID = 2**53 - 1
MAX_ID_CHARS = 256
# Longer integer literals are refused before int() parses them (it is quadratic in the digits).
MAX_INT_DIGITS = 64

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# A lone surrogate can only enter through a \uD800-\uDFFF escape (the body is strict UTF-8).
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _NotJson:
    """Stands for NaN, +-Infinity, a float that overflows (1e999) or an absurdly long integer: values
    Python's json module reads but JSON (RFC 8259 section 6) has no room for."""

    def __repr__(self) -> str:
        return "NaN/Infinity/out-of-range number"


_NOT_JSON = _NotJson()


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _object(pairs: list) -> dict:
    # Duplicate names make parsers disagree about what was sent (RFC 8259 section 4): refuse them.
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _float(text: str) -> Any:
    value = float(text)
    return value if math.isfinite(value) else _NOT_JSON


def _int(text: str) -> Any:
    return int(text) if len(text) <= MAX_INT_DIGITS else _NOT_JSON


def _loads(body: bytes) -> Any:
    return json.loads(
        body.decode("utf-8"),
        object_pairs_hook=_object,
        parse_float=_float,
        parse_int=_int,
        parse_constant=lambda _name: _NOT_JSON,
    )


def _first_bad_value(doc: dict, strings: bool) -> tuple[str, str] | None:
    """``(path, why)`` of the first value JSON-RPC cannot carry: a non-finite or out-of-range number,
    or (when ``strings``) a string or key holding a lone surrogate. Iterative: nesting is unbounded."""
    stack: list[tuple[str, Any]] = [("", doc)]
    while stack:
        path, value = stack.pop()
        if value is _NOT_JSON:
            return path, "is NaN, Infinity or a number out of range, which JSON cannot carry"
        if isinstance(value, str):
            if strings and _LONE_SURROGATE.search(value):
                return path, "holds a lone UTF-16 surrogate (not Unicode text)"
        elif isinstance(value, dict):
            for key, item in reversed(list(value.items())):
                if strings and _LONE_SURROGATE.search(key):
                    return path or "request", "has a key holding a lone UTF-16 surrogate (not Unicode text)"
                stack.append((f"{path}.{key}" if path else key, item))
        elif isinstance(value, list):
            for index in range(len(value) - 1, -1, -1):
                stack.append((f"{path}[{index}]", value[index]))
    return None


def _valid_id(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        return len(value) <= MAX_ID_CHARS and not _LONE_SURROGATE.search(value)
    if isinstance(value, int):
        return abs(value) <= MAX_SAFE_ID
    if isinstance(value, float):
        return value.is_integer() and abs(value) <= MAX_SAFE_ID
    return False


def parse_request(body: bytes) -> RpcRequest:
    """Parse one JSON-RPC request, refusing before anything runs whatever it could not answer.

    -32700: not UTF-8 JSON. -32600: not a single request object (batches are refused), a duplicate
    key, no ``id`` (a notification: every A2A method has a result to give), an ``id`` that is not a
    string of at most 256 characters, an integer within +-(2**53-1) or null, a bad ``jsonrpc`` or
    ``method``, or a value JSON cannot carry outside ``params``. -32602: such a value (NaN, Infinity,
    1e999, a lone surrogate) inside ``params``, or params not an object.
    """
    try:
        doc = _loads(body)
    except _DuplicateKey as exc:
        raise RpcError(INVALID_REQUEST, f"Invalid Request: duplicate key {exc.key!r}") from exc
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # deep nesting: RecursionError
        raise RpcError(PARSE_ERROR, "Parse error") from exc
    if not isinstance(doc, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC request object (batches are not supported)")
    if "id" not in doc:
        raise RpcError(
            INVALID_REQUEST,
            "Invalid Request: no id; notifications are not served (every method here answers with a result)",
        )
    request_id = doc["id"]
    if not _valid_id(request_id):
        raise RpcError(
            INVALID_REQUEST,
            f"Invalid Request: id must be a string (at most {MAX_ID_CHARS} characters), an integer "
            f"within +-{MAX_SAFE_ID} or null",
        )
    bad = _first_bad_value(doc, strings=_SURROGATE_ESCAPE.search(body) is not None)
    if bad is not None:
        path, why = bad
        code, label = (INVALID_PARAMS, "Invalid params") if path.startswith("params") else (INVALID_REQUEST, "Invalid Request")
        raise RpcError(code, f"{label}: {path} {why}", request_id)
    if doc.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"', request_id)
    method = doc.get("method")
    if not isinstance(method, str):
        raise RpcError(INVALID_REQUEST, "Invalid Request: method must be a string", request_id)
    params = doc.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params: params must be an object", request_id)
    return RpcRequest(request_id, method, params)


def dumps(value: Any) -> str:
    """Compact standard JSON for every answer and frame: never NaN or Infinity (an executor's
    non-finite float becomes null), never a lone surrogate (it becomes U+FFFD), never a TypeError."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str)
    except ValueError:
        text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str)
    return unicode_text(text)


def unicode_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so that it encodes as UTF-8."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def resolve_method(method: str, task_acceptance: str) -> str | None:
    """The method the door serves for ``method``, or None (-32601). ``none`` serves no task starts."""
    if method not in METHODS:
        return None
    if task_acceptance == "none" and method in TASK_STARTING:
        return None
    return method


@dataclass
class IncomingMessage:
    message_id: str
    context_id: str | None
    text: str
    blocking: bool = False  # params.configuration.blocking: answer once the task ended (or asks for input)


PART_KINDS = ("text", "file", "data")  # A2A 0.3 Part kinds


def parse_message(params: dict, request_id: Any = None) -> IncomingMessage:
    """``params.message`` (or ``params`` itself when absent) as an A2A message; -32602 otherwise.

    Text parts are joined with ``\\n``; file and data parts are ignored, but a message needs at least
    one text part (this capsule's work is text: an empty task is refused, not run). Both the upstream
    part shape ``{"text": ...}`` and A2A 0.3's ``{"kind": "text", "text": ...}`` are read.
    """

    def bad(why: str) -> RpcError:
        return RpcError(INVALID_PARAMS, f"Invalid params: {why}", request_id)

    message = params.get("message", params)
    if not isinstance(message, dict):
        raise bad("message must be an object")
    message_id = message.get("messageId")
    if not isinstance(message_id, str) or not message_id:
        raise bad("message.messageId must be a non-empty string")
    if len(message_id) > MAX_ID_CHARS:
        raise bad(f"message.messageId is longer than {MAX_ID_CHARS} characters")
    if not isinstance(message.get("role"), str):
        raise bad("message.role must be a string")
    context_id = message.get("contextId")
    if context_id is not None:
        if not isinstance(context_id, str):
            raise bad("message.contextId must be a string")
        if not _CONTEXT_ID.match(context_id):
            raise bad("message.contextId may use only letters, digits, '.', '_' and '-' (at most 128)")
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise bad("message.parts must be an array")
    texts = []
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            raise bad(f"message.parts[{index}] must be an object")
        kind = part.get("kind")
        if kind is None:  # upstream's shape has no kind; A2A 0.3 always sends one
            kind = next((k for k in PART_KINDS if k in part), "text")
        if kind not in PART_KINDS:
            raise bad(f"message.parts[{index}].kind must be one of {', '.join(PART_KINDS)}")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise bad(f"message.parts[{index}].text must be a string")
            texts.append(text)
    if not texts:
        raise bad("message.parts holds no text part; this capsule takes its task as text")
    configuration = params.get("configuration") if "message" in params else None
    blocking = isinstance(configuration, dict) and configuration.get("blocking") is True
    return IncomingMessage(message_id, context_id, "\n".join(texts), blocking)


# --- wire shapes ----------------------------------------------------------------------------


def _text_parts(text: str) -> list[dict]:
    return [{"kind": "text", "text": text}]


def agent_message(task_id: str, context_id: str | None, text: str) -> dict:
    """An A2A message from the agent carrying ``text`` (a task status's ``message``)."""
    out = {"kind": "message", "messageId": f"msg_{task_id}_status", "role": "agent", "parts": _text_parts(text)}
    if context_id:
        out["contextId"] = context_id
        out["taskId"] = task_id
    return out


def _artifact(name: str, text: str) -> dict:
    return {"artifactId": name, "name": name, "parts": _text_parts(text)}


def task_result(task: Task) -> dict:
    """A task as ``message/send`` and ``tasks/get`` answer it (upstream's fields + A2A ``kind``).

    input-required carries the question as a ``prompt`` artifact; a terminal task carries its
    final message as ``status.message``; a completed one its result as a ``response`` artifact.
    """
    status: dict[str, Any] = {"state": task.state}
    if task.terminal and task.message:
        status["message"] = agent_message(task.id, task.context_id, task.message)
    out: dict[str, Any] = {"kind": "task", "id": task.id, "contextId": task.context_id, "status": status}
    if task.state == INPUT_REQUIRED and task.prompt is not None:
        out["artifacts"] = [_artifact("prompt", task.prompt)]
    elif task.state == COMPLETED and task.response:
        out["artifacts"] = [_artifact("response", task.response)]
    return out


def status_frame(
    task_id: str, context_id: str | None, state: str, message: str, response: str | None = None, final: bool = False
) -> dict:
    """The data of an ``event: status`` frame.

    Upstream's keys (``id``, ``context_id``, ``status{state,message,response?}``, ``final``) plus a
    JSON-RPC ``result`` holding the A2A 0.3 ``TaskStatusUpdateEvent``, which is what stock A2A
    streaming clients (a2a-sdk) read from each frame; upstream clients ignore the extra keys.
    """
    status: dict[str, Any] = {"state": state, "message": message}
    if response is not None:
        status["response"] = response
    data: dict[str, Any] = {"id": task_id}
    if context_id:
        data["context_id"] = context_id
    data["status"] = status
    data["final"] = final
    a2a_text = response if (state == COMPLETED and response) else message
    data["jsonrpc"] = "2.0"
    data["result"] = {
        "kind": "status-update",
        "taskId": task_id,
        "contextId": context_id or "",
        "status": {"state": state, "message": agent_message(task_id, context_id, a2a_text)},
        "final": final,
    }
    return data


def artifact_frame(task_id: str, context_id: str | None, artifact: dict) -> dict:
    """The data of an ``event: artifact`` frame: upstream's ``{id, artifact}`` + the A2A update."""
    name = str(artifact.get("tool_name", "artifact"))
    content = artifact.get("content", "")
    content = content if isinstance(content, str) else dumps(content)
    return {
        "id": task_id,
        "artifact": artifact,
        "jsonrpc": "2.0",
        "result": {
            "kind": "artifact-update",
            "taskId": task_id,
            "contextId": context_id or "",
            "artifact": {"artifactId": f"art_{uuid.uuid4().hex}", "name": name, "parts": _text_parts(content)},
        },
    }


def text_frame(task_id: str, text: str, final: bool = False) -> dict:
    """The data of an ``event: text`` / ``event: thinking`` frame (upstream shape only)."""
    return {"id": task_id, "text": text, "final": final}


def build_card(card: dict, url: str, task_acceptance: str, secured: bool = False) -> dict:
    """The agent card: upstream's ``{name, version, url, capabilities}`` + A2A 0.3 card fields.

    ``capabilities.streaming`` is false when the door serves no ``message/stream`` (``none``).
    ``secured``: the door wants a bearer token, declared as A2A ``securitySchemes`` + ``security``.
    """
    name = str(card.get("name", ""))
    version = str(card.get("version", ""))
    accepts = task_acceptance != "none"
    capabilities = dict(card.get("capabilities") or {})
    capabilities["streaming"] = bool(capabilities.get("streaming", True)) and accepts
    capabilities.setdefault("pushNotifications", False)
    skills = []
    if accepts:
        skills.append(
            {
                "id": "task",
                "name": "Run a task",
                "description": "Runs one task given as a text message and reports its outcome.",
                "tags": ["task"],
            }
        )
    out = {
        "name": name,
        "version": version,
        "url": url,
        "capabilities": capabilities,
        "description": card.get("description") or f"Murmur capsule {name} {version}".strip(),
        "protocolVersion": PROTOCOL_VERSION,
        "preferredTransport": "JSONRPC",
        "defaultInputModes": [TEXT_MODE],
        "defaultOutputModes": [TEXT_MODE],
        "skills": skills,
    }
    if secured:
        out["securitySchemes"] = SECURITY_SCHEMES
        out["security"] = SECURITY
    return out
