"""Host imports: what a guest can call, and nothing else.

Linked for every guest: WASI p2 (``Linker.add_wasip2``: cli, io, clocks, random, filesystem, and
sockets — but the WASI context grants no network, so every socket call is refused with
access-denied), ``wasi:http@0.2.x`` (wasmtime's, with ``outgoing-handler.handle`` shadowed so each
request is held to capabilities.network.allow: mur.wasm.wasi_http) and the murmur:* interfaces
below.

| import                                  | host side                                     |
|-----------------------------------------|-----------------------------------------------|
| murmur:tool-registry/invoke@0.1.0       | ``invoke(name, ToolInput)`` (the session's registry) |
| murmur:http/outbound@0.1.0              | mur.wasm.http.OutboundHttp (allow-listed httpx) |
| murmur:shell/execute@0.1.0              | ``shell(binary, args, env)`` (the shell sandbox) |
| murmur:task/task@0.1.0                  | ``request_input(prompt)`` (A2A input-required) |
| murmur:text/chunks@0.1.0                | ``on_chunk(kind, text)`` (SSE stream)          |
| murmur:runtime/inference@0.2.0          | ``run_inference(request)`` (hooks)             |
| murmur:message/send@0.1.0               | mur.wasm.peer.send (A2A to a peer, allow-listed) |
| murmur:artifact-manager/manage@0.1.0    | mur.wasm.peer (the session's ``catalog``)       |
| wasi:http/outgoing-handler@0.2.x        | mur.wasm.wasi_http.handle (allow-listed)        |

One linker per engine serves every guest call (building one costs about a third of a
millisecond, and closing one as much again): its host functions close over nothing per call. Each
call's grants live in a CallContext carried as its Store's data, and every import reads them from
the Store it is called with (mur.wasm.callcontext), so call A's grants cannot be reached from call
B's Store. Every import is wrapped in mur.wasm.interrupt.host_import, so a Ctrl-C (or SIGTERM's Terminated) raised while one runs traps the guest instead of escaping
wasmtime-py's ctypes trampoline.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from mur.errors import MurError
from mur.wasm.callcontext import call_context
from mur.wasm.interrupt import host_import
from mur.wasm.types import ToolResult, input_from_value, result_to_value

TOOL_RUN = "murmur:tool/run@0.1.0"
CAPSULE_RUN = "murmur:capsule/run@0.1.0"
TOOL_REGISTRY = "murmur:tool-registry/invoke@0.1.0"
HTTP_OUTBOUND = "murmur:http/outbound@0.1.0"
SHELL_EXECUTE = "murmur:shell/execute@0.1.0"
TASK = "murmur:task/task@0.1.0"
TEXT_CHUNKS = "murmur:text/chunks@0.1.0"
INFERENCE = "murmur:runtime/inference@0.2.0"
HOOK_LIFECYCLE = "murmur:hook/lifecycle@0.5.0"
LIFECYCLE_FUNCS = ("on-stage", "on-session-start", "on-task-start", "on-inference", "on-tool-call",
                   "on-shell", "on-compaction", "on-task-end", "on-session-end")

NO_SHELL = "shell capability not granted"
NO_TASK = "request-input is only available while serving an A2A task"
NO_INFERENCE = "no inference driver is configured for this capsule"
NO_REGISTRY = "tool registry is not available to this guest"


def _record(**fields: Any) -> Any:
    from wasmtime.component import Record

    rec = Record()
    for name, value in fields.items():
        setattr(rec, name.replace("_", "-"), value)
    return rec


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _invoke(store: Any, name: str, value: Any) -> Any:
    ctx = call_context(store)
    if ctx.invoke is None:
        return NO_REGISTRY
    try:
        return result_to_value(ctx.invoke(name, input_from_value(value)))
    except MurError as exc:
        return exc.message
    except Exception as exc:  # the guest gets a reason, never a host traceback
        if getattr(exc, "ends_task", False):  # the task is over (an input wait timed out): trap the capsule
            raise
        return f"tool '{name}' failed: {type(exc).__name__}: {exc}"


def _http_send(store: Any, req: Any) -> Any:
    out = call_context(store).http.send(
        getattr(req, "method", ""),
        getattr(req, "url", ""),
        list(getattr(req, "headers", []) or []),
        getattr(req, "body", None),
        getattr(req, "timeout-ms", None),
    )
    if isinstance(out, str):
        return out
    return _record(status=out["status"], headers=out["headers"], body=out["body"])


def _shell_run(store: Any, binary: str, args: list[str], env: list[tuple[str, str]]) -> Any:
    ctx = call_context(store)
    if ctx.shell is None:
        return NO_SHELL
    try:
        res = ctx.shell(binary, list(args), [tuple(kv) for kv in env])
    except MurError as exc:
        return exc.message
    except Exception as exc:
        return f"shell '{binary}' failed: {type(exc).__name__}: {exc}"
    return _record(
        exit_code=int(_field(res, "exit_code", -1)),
        stdout=str(_field(res, "stdout", "") or ""),
        stderr=str(_field(res, "stderr", "") or ""),
        truncated=bool(_field(res, "truncated", False)),
        full_output_path=_field(res, "full_output_path"),
    )


def _request_input(store: Any, prompt: str) -> str:
    # The WIT signature has no error channel: refusing means trapping the guest (upstream does
    # the same); the raised MurError becomes the call's E-RUN-001 message.
    ctx = call_context(store)
    if ctx.request_input is None:
        raise MurError("E-RUN-001", NO_TASK)
    return str(ctx.request_input(prompt))


def _chunk(kind: str) -> Callable[..., Any]:
    def emit(store: Any, text: str) -> None:
        ctx = call_context(store)
        if ctx.on_chunk is not None:
            try:
                ctx.on_chunk(kind, text)
            except Exception:
                pass
        return None

    return emit


def _run_inference(store: Any, request: Any) -> Any:
    ctx = call_context(store)
    if ctx.run_inference is None:
        return NO_INFERENCE
    try:
        out = ctx.run_inference(request)
    except MurError as exc:
        return exc.message
    except Exception as exc:
        return f"inference failed: {type(exc).__name__}: {exc}"
    if isinstance(out, str):
        return out
    return _record(
        text=str(_field(out, "text", "")),
        model_used=str(_field(out, "model_used", "")),
        input_tokens=int(_field(out, "input_tokens", 0)),
        output_tokens=int(_field(out, "output_tokens", 0)),
    )


def _not_callable_tool_run(_store: Any, _value: Any) -> Any:
    # A capsule imports murmur:tool/run only for its records (tool-registry `use`s them).
    return result_to_value(ToolResult(
        status="error",
        summary="murmur:tool/run is not callable from a guest; call tools through murmur:tool-registry/invoke",
    ))


def _not_callable_lifecycle(_store: Any, _event: Any) -> Any:
    # A hook imports murmur:hook/lifecycle only for its records (inference `use`s `message`).
    return "murmur:hook/lifecycle functions are hook exports, not host imports"


def build_linker(engine: Any) -> Any:
    """A component Linker with WASI p2 and every murmur:* import; each import serves the
    CallContext of the Store it is called from, so one linker is shared by every call."""
    from wasmtime.component import Linker

    from mur.wasm import peer, wasi_http

    linker = Linker(engine)
    linker.add_wasip2()
    wasi_http.add_to_linker(linker)
    with linker.root() as root:
        # componentize-py guests import every function of an interface they take types from, so
        # the type-only imports get stubs that answer "not callable here".
        with root.add_instance(TOOL_RUN) as inst:
            inst.add_func("run", host_import(_not_callable_tool_run))
        with root.add_instance(HOOK_LIFECYCLE) as inst:
            for fn in LIFECYCLE_FUNCS:
                inst.add_func(fn, host_import(_not_callable_lifecycle))
        with root.add_instance(TOOL_REGISTRY) as inst:
            inst.add_func("invoke", host_import(_invoke))
        with root.add_instance(HTTP_OUTBOUND) as inst:
            inst.add_func("send", host_import(_http_send))
        with root.add_instance(SHELL_EXECUTE) as inst:
            inst.add_func("run", host_import(_shell_run))
        with root.add_instance(TASK) as inst:
            inst.add_func("request-input", host_import(_request_input))
        with root.add_instance(TEXT_CHUNKS) as inst:
            inst.add_func("emit-chunk", host_import(_chunk("text")))
            inst.add_func("emit-thinking-chunk", host_import(_chunk("thinking")))
        with root.add_instance(INFERENCE) as inst:
            inst.add_func("run-inference", host_import(_run_inference))
        with root.add_instance(peer.MESSAGE_SEND) as inst:
            inst.add_func("send", host_import(peer.send))
        with root.add_instance(peer.MANAGE) as inst:
            for fn, impl in peer.MANAGE_FUNCS.items():
                inst.add_func(fn, host_import(impl))
    return linker


_SHARED: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared_linker(engine: Any) -> Any:
    """The one Linker for `engine` (a wasmtime Engine), built on first use and kept as long as the
    engine lives. Instantiating through it from several threads at once is safe: wasmtime's
    Linker::instantiate takes it by shared reference, and it holds no per-call state."""
    with _SHARED_LOCK:
        linker = _SHARED.get(engine)
        if linker is None:
            linker = _SHARED[engine] = build_linker(engine)
        return linker
