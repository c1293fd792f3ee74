"""JSON-RPC 2.0 envelopes, A2A message parsing, and the wire shapes the door answers with.

Method names and shapes are upstream's (A2A 0.3 names: ``message/send``, ``tasks/get``,
``message/stream``, plus murmur's ``stream/watch``). Where the current A2A spec wants more than
upstream sends, fields are *added*, never renamed, so both upstream clients and the ``a2a-sdk``
client parse the same answers (docs/a2a.md, "Reconciliation with the A2A spec").
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from mur.a2a.tasks import COMPLETED, INPUT_REQUIRED, Task

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002  # A2A's TaskNotCancelableError

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


def parse_request(body: bytes) -> RpcRequest:
    """Parse one JSON-RPC request; RpcError -32700 (not JSON) or -32600 (not a request)."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # deep nesting: RecursionError
        raise RpcError(PARSE_ERROR, "Parse error") from exc
    if not isinstance(doc, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC request object (batches are not supported)")
    request_id = doc.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int, float, type(None))):
        raise RpcError(INVALID_REQUEST, "Invalid Request: id must be a string, a number or null")
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


def parse_message(params: dict, request_id: Any = None) -> IncomingMessage:
    """``params.message`` (or ``params`` itself when absent) as an A2A message; -32602 otherwise.

    Text parts are joined with ``\\n``; parts of other kinds (file, data) are ignored. Both the
    upstream part shape ``{"text": ...}`` and A2A 0.3's ``{"kind": "text", "text": ...}`` are read.
    """

    def bad(why: str) -> RpcError:
        return RpcError(INVALID_PARAMS, f"Invalid params: {why}", request_id)

    message = params.get("message", params)
    if not isinstance(message, dict):
        raise bad("message must be an object")
    message_id = message.get("messageId")
    if not isinstance(message_id, str):
        raise bad("message.messageId must be a string")
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
        kind = part.get("kind", "text")
        text = part.get("text")
        if kind == "text" and text is not None:
            if not isinstance(text, str):
                raise bad(f"message.parts[{index}].text must be a string")
            texts.append(text)
    return IncomingMessage(message_id, context_id, "\n".join(texts))


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
    content = content if isinstance(content, str) else json.dumps(content)
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


def build_card(card: dict, url: str, task_acceptance: str) -> dict:
    """The agent card: upstream's ``{name, version, url, capabilities}`` + A2A 0.3 card fields.

    ``capabilities.streaming`` is false when the door serves no ``message/stream`` (``none``).
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
    return out
