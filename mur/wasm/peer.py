"""Upstream's two capsule-side host interfaces beyond tool-registry: `murmur:message/send@0.1.0`
(ask a peer capsule over A2A) and `murmur:artifact-manager/manage@0.1.0` (the session's inventory).

* ``send(peer-url, message)``: one A2A ``message/send`` to the peer (``localhost:<port>`` or a URL;
  no scheme means ``http://``), through the guest's allow-listed HTTP (mur.wasm.http: the same
  check as ``murmur:http/outbound``, refused with upstream's words
  ``network policy: '<peer>' not in capabilities.network.allow``). The answer is the peer's task
  ``{task-id, context-id, state}``; each send is reported to ``on_send`` (the ``a2a_send`` trace
  event).
* ``manage``: ``list``/``describe``/``diagnostics`` answer from the session's staged inventory
  (:class:`Catalog`), as upstream. ``search`` and ``remove`` answer upstream's own
  ``not implemented (...)``. ``pull`` is refused (``E-RUN-002``): installing into a running
  session would bypass murmur.lock and the launch checks; declare the artifact and `mur install`.
  Outside a capsule session (no catalog) every call answers that it is unavailable.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

MESSAGE_SEND = "murmur:message/send@0.1.0"
MANAGE = "murmur:artifact-manager/manage@0.1.0"
NO_CATALOG = "murmur:artifact-manager is only available to a capsule component in a session"
PULL_REFUSED = ("error[E-RUN-002]: murmur:artifact-manager/manage#pull is not provided by mur: a running "
                "capsule cannot install artifacts; declare {name}@{version} in murmur.yaml and run `mur install`")


@dataclass
class CatalogEntry:
    name: str
    version: str
    runtime: str  # "wasm" | "native" (upstream's runtime-type)
    description: str = ""
    tags: list[str] = field(default_factory=list)
    input_schema: str | None = None
    output_schema: str | None = None


@dataclass
class Catalog:
    """What a capsule component may ask about its own session."""

    session_id: str
    entries: list[CatalogEntry]

    def find(self, name: str) -> CatalogEntry | None:
        return next((e for e in self.entries if e.name == name), None)


def _record(**fields: Any) -> Any:
    from wasmtime.component import Record

    rec = Record()
    for name, value in fields.items():
        setattr(rec, name.replace("_", "-"), value)
    return rec


def _summary(entry: CatalogEntry) -> Any:
    return _record(name=entry.name, version=entry.version, runtime=entry.runtime)


def _catalog(store: Any) -> Catalog | None:
    from mur.wasm.callcontext import call_context

    return call_context(store).catalog


def manage_list(store: Any) -> Any:
    catalog = _catalog(store)
    return [_summary(e) for e in catalog.entries] if catalog is not None else []


def manage_describe(store: Any, name: str) -> Any:
    catalog = _catalog(store)
    if catalog is None:
        return NO_CATALOG
    entry = catalog.find(name)
    if entry is None:
        return f"artifact '{name}' is not installed"
    return _record(name=entry.name, version=entry.version, description=entry.description, tags=list(entry.tags),
                   runtime=entry.runtime, input_schema=entry.input_schema, output_schema=entry.output_schema)


def manage_search(store: Any, query: str) -> Any:
    return NO_CATALOG if _catalog(store) is None else f"not implemented (query: {query})"


def manage_pull(store: Any, name: str, version: str) -> Any:
    return NO_CATALOG if _catalog(store) is None else PULL_REFUSED.format(name=name, version=version)


def manage_remove(store: Any, name: str) -> Any:
    return NO_CATALOG if _catalog(store) is None else f"not implemented (name: {name})"


def manage_diagnostics(store: Any) -> Any:
    catalog = _catalog(store)
    if catalog is None:
        return NO_CATALOG
    return _record(capsule_id=catalog.session_id, installed=[_summary(e) for e in catalog.entries],
                   capabilities="artifact-manager/search, pull and remove are not implemented")


MANAGE_FUNCS: dict[str, Callable[..., Any]] = {
    "list": manage_list, "describe": manage_describe, "search": manage_search, "pull": manage_pull,
    "remove": manage_remove, "diagnostics": manage_diagnostics,
}


def peer_url(text: str) -> str:
    """The URL a peer is reached at: `localhost:1234` means http://localhost:1234/."""
    url = text if "://" in text else f"http://{text}"
    return url if url.count("/") > 2 else url + "/"


def send(store: Any, peer: str, message: Any) -> Any:
    """`message/send`: one A2A message to a peer capsule; ok(task-result) or err(reason)."""
    from mur.wasm.callcontext import call_context

    ctx = call_context(store)
    url = peer_url(peer)
    message_id = str(getattr(message, "message-id", "") or f"msg_{uuid.uuid4().hex}")
    context_id = getattr(message, "context-id", None)
    body = {"jsonrpc": "2.0", "id": f"req_{uuid.uuid4().hex}", "method": "message/send",
            "params": {"message": {"messageId": message_id, "contextId": context_id, "role": "user",
                                   "parts": [{"text": str(getattr(message, "text", ""))}]}}}
    out = ctx.http.send("POST", url, [("content-type", "application/json")], json.dumps(body).encode())
    if isinstance(out, str):
        return out.replace(f"'{url}'", f"'{peer}'") if out.startswith("network policy:") else \
            f"failed to send to {peer}: {out}"
    try:
        answer = json.loads(out["body"])
    except ValueError:
        return f"peer {peer} answered HTTP {out['status']} without JSON"
    if not isinstance(answer, dict) or "result" not in answer:
        error = answer.get("error") if isinstance(answer, dict) else None
        reason = error.get("message") if isinstance(error, dict) else f"HTTP {out['status']}"
        return f"peer {peer} refused the message: {reason}"
    task = answer["result"] if isinstance(answer["result"], dict) else {}
    status = task.get("status") if isinstance(task.get("status"), dict) else {}
    task_id, task_context = str(task.get("id", "")), str(task.get("contextId", "") or context_id or "")
    if ctx.on_send is not None:
        ctx.on_send({"peer_url": peer, "message_id": message_id, "task_id": task_id, "context_id": task_context})
    return _record(task_id=task_id, context_id=task_context, state=str(status.get("state", "")))
