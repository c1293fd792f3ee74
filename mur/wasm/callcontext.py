"""The grants of one guest call: a CallContext carried as its Store's data, read by every host import
(mur.wasm.linker, mur.wasm.peer, mur.wasm.wasi_http) from the Store it is called with, so call A's
grants cannot be reached from call B's Store. A leaf: the linker and the imports it links both read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mur.errors import MurError
from mur.wasm.http import OutboundHttp
from mur.wasm.types import ToolInput, ToolResult


@dataclass
class CallContext:
    """Everything the host imports of one guest call may use."""

    kind: str
    label: str
    http: OutboundHttp
    invoke: Callable[[str, ToolInput], ToolResult] | None = None
    shell: Callable[..., Any] | None = None
    request_input: Callable[[str], str] | None = None
    on_chunk: Callable[[str, str], None] | None = None
    run_inference: Callable[[Any], Any] | None = None
    catalog: Any = None  # mur.wasm.peer.Catalog: the session inventory artifact-manager answers from
    on_send: Callable[[dict], None] | None = None  # each murmur:message/send that reached a peer (trace)
    engine: Any = None  # the wasmtime Engine of this call's Store (wasi:http's helper is per engine)
    wasi_http: Any = None  # mur.wasm.wasi_http's helper instance in this Store, made on first use


def call_context(store: Any) -> CallContext:
    """The CallContext of the guest call running in `store` (a Store or a host import's StoreContext).

    wasmtime-py's StoreContext has no ``data()`` (its Store does, reading the context pointer both
    share), so the Store method is applied to it directly."""
    from wasmtime import Store

    ctx = Store.data(store)
    if not isinstance(ctx, CallContext):  # a Store mur did not create: no grants at all
        raise MurError("E-RUN-001", "host import called from a store without a mur call context")
    return ctx
