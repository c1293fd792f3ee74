"""Instantiate a guest component and call it, with its grants, limits and error mapping.

Each call gets a fresh Store and a fresh instance: its own WASI context, store limits and deadline,
and as the Store's data the CallContext (grants) its host imports read. The Linker is built once
per engine and shared (mur.wasm.linker.shared_linker); components come compiled from the engine's
cache. Nothing a guest did survives its call (docs/wasm.md "Tool calls"). Failures become one of:

* E-RUN-001 ``GuestError(kind="limit", limit=...)`` — deadline_seconds / memory_bytes /
  table_elements / instances fired; the message names the field;
* E-RUN-001 ``GuestError(kind="trap")`` — the guest panicked or trapped ("... trapped: ...");
* E-RUN-001 ``GuestError(kind="compile")`` — not a valid component; missing export;
* E-RUN-002 ``GuestError(kind="link")`` — the component imports something mur does not link;
* E-RUN-004 (capsule) / E-RUN-008 (tool) — the .wasm file is missing.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.fsafe import open_append
from mur.wasm.engine import WasmEngine, default_engine
from mur.wasm.http import OutboundHttp
from mur.wasm.interrupt import GuestInterrupted, check_armed, guest_call, interruption
from mur.wasm.limits import (
    GuestError,
    apply_store_limits,
    classify_call_failure,
    classify_instantiate_failure,
    deadline_ticks,
)
from mur.wasm.callcontext import CallContext
from mur.wasm.linker import CAPSULE_RUN, TOOL_RUN, shared_linker
from mur.wasm.types import ToolInput, ToolResult, input_to_value, result_from_value

OUTPUT_TAIL_BYTES = 64 * 1024


@dataclass
class GuestConfig:
    """One guest's launch parameters, already resolved by the session (grants, env, limits)."""

    wasm_path: Path
    label: str  # artifact/capsule name, for errors and traces
    preopen: Path | None  # host dir mounted as "." (None = no filesystem at all)
    env: list[tuple[str, str]]  # exactly what the guest sees (mur.wasm.env.guest_env)
    limits: Any  # mur.manifest.capsule.Limits
    http_allow: list[Any] = field(default_factory=list)  # [AllowEntry]; [] = deny every request
    on_http: Callable[[dict], None] | None = None  # {"url","method","allowed","status"?,"error"?}
    log_path: Path | None = None  # guest stdout+stderr are appended here when set
    http_transport: Any = None  # httpx transport override (tests inject one; None = real network)


class OutputTail:
    """The last OUTPUT_TAIL_BYTES a guest wrote, quoted in trap messages (callers hold their own lock)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def add(self, data: bytes) -> None:
        self._buf += data
        if len(self._buf) > OUTPUT_TAIL_BYTES:
            del self._buf[: len(self._buf) - OUTPUT_TAIL_BYTES]

    def clear(self) -> None:
        self._buf.clear()

    def text(self) -> str:
        return self._buf.decode("utf-8", errors="replace")


class _Output:
    """One call's guest stdout/stderr: the tail kept for error messages, everything appended to a log."""

    def __init__(self, log_path: Path | None):
        self._lock = threading.Lock()
        self._tail = OutputTail()
        self._log = None
        if log_path is not None:
            try:
                log_path.parent.mkdir(parents=True, exist_ok=True)
                self._log = os.fdopen(open_append(log_path), "ab")  # never through a link
            except OSError:
                self._log = None

    def write(self, data: bytes) -> None:
        with self._lock:
            self._tail.add(data)
            if self._log is not None:
                try:
                    self._log.write(data)
                    self._log.flush()
                except OSError:
                    pass

    def text(self) -> str:
        with self._lock:
            return self._tail.text()

    def close(self) -> None:
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None


def export_index(component: Any, interface: str, name: str) -> Any:
    """The ExportIndex of `interface#name` in a compiled component (valid for every instance of
    it), or None when the component does not export it."""
    idx = component.get_export_index(interface)
    return component.get_export_index(name, idx) if idx is not None else None


@dataclass
class LiveInstance:
    """A component instantiated in its own Store (whose data is the call's CallContext)."""

    store: Any
    component: Any
    instance: Any

    def func(self, interface: str, name: str) -> Any:
        """The exported function `interface#name`, or None when the component does not export it."""
        return self.func_at(export_index(self.component, interface, name))

    def func_at(self, index: Any) -> Any:
        """The exported function at an ExportIndex from export_index() (None passes through)."""
        return self.instance.get_func(self.store, index) if index is not None else None

    def close(self) -> None:
        """Release the Store (its WASI context: all guest output has been delivered, and the
        instance's memory). The shared Linker stays."""
        self.store.close()


def instantiate(engine: WasmEngine, component: Any, cfg: GuestConfig, ctx: CallContext,
                write_output: Callable[[bytes], None]) -> LiveInstance:
    """`component` (from engine.component) in a fresh Store: the guest's WASI context (argv, env,
    preopen as ".", stdout/stderr to `write_output`), its store limits and a full deadline_seconds
    budget, and `ctx` as the Store's data for the shared linker's host imports. A failed
    instantiation is classified (E-RUN-001/002)."""
    from wasmtime import Store, Trap, WasiConfig, WasmtimeError

    engine.start_ticker()
    linker = shared_linker(engine.engine)
    store = Store(engine.engine, data=ctx)
    try:
        wasi = WasiConfig()
        wasi.argv = [cfg.label]
        wasi.env = [(str(k), str(v)) for k, v in cfg.env]
        if cfg.preopen is not None:
            wasi.preopen_dir(str(cfg.preopen), ".")
        wasi.stdout_custom = write_output
        wasi.stderr_custom = write_output
        store.set_wasi(wasi)
        store.set_wasi_http()  # wasi:http's context (its handle is mur's: mur.wasm.wasi_http)
        apply_store_limits(store, cfg.limits)
        store.set_epoch_deadline(deadline_ticks(cfg.limits.deadline_seconds))
        check_armed()  # a Ctrl-C while the store was made advanced the epoch before this deadline
        try:
            instance = linker.instantiate(store, component)
        except (WasmtimeError, Trap) as exc:
            raise classify_instantiate_failure(exc, kind=ctx.kind, label=cfg.label, limits=cfg.limits) from exc
    except BaseException:
        store.close()
        raise
    return LiveInstance(store, component, instance)


class WasmHost:
    """Runs capsule, tool and driver components for a session."""

    def __init__(
        self,
        *,
        shell: Callable[..., Any] | None = None,
        request_input: Callable[[str], str] | None = None,
        engine: WasmEngine | None = None,
        on_chunk: Callable[[str, str], None] | None = None,
        run_inference: Callable[[Any], Any] | None = None,
        catalog: Any = None,
        on_send: Callable[[dict], None] | None = None,
    ):
        self.shell = shell
        self.request_input = request_input
        self.engine = engine or default_engine()
        self.on_chunk = on_chunk
        self.run_inference = run_inference
        self.catalog = catalog  # mur.wasm.peer.Catalog for murmur:artifact-manager (capsule runs)
        self.on_send = on_send  # hears each murmur:message/send that reached a peer
        # weak: the engine decides how long a compiled component lives, not its callers
        self._exports: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], Any]] = weakref.WeakKeyDictionary()
        self._exports_lock = threading.Lock()

    # -- public API ---------------------------------------------------------------------------

    def run_capsule(self, cfg: GuestConfig, invoke: Callable[[str, ToolInput], ToolResult]) -> None:
        """Call a `capsule`-world component's murmur:capsule/run, tools reachable through `invoke`."""
        self._call(cfg, "capsule", CAPSULE_RUN, "run", (), invoke=invoke)

    def call_tool(self, cfg: GuestConfig, data: ToolInput, *, kind: str = "tool") -> ToolResult:
        """Call a `tool`/`driver`-world component's murmur:tool/run once."""
        value = self._call(cfg, kind, TOOL_RUN, "run", (input_to_value(data),))
        try:
            return result_from_value(value)
        except (AttributeError, TypeError, ValueError) as exc:
            raise GuestError("E-RUN-001", f"{kind} '{cfg.label}' returned a malformed tool-result: {exc}",
                             kind="trap") from exc

    def precompile(self, wasm_path: Path, *, kind: str = "tool", label: str = "") -> None:
        """Compile (or load from cache) ahead of the first call, e.g. while staging."""
        self.engine.component(Path(wasm_path), kind=kind, label=label)

    # -- machinery ----------------------------------------------------------------------------

    def _export(self, component: Any, interface: str, func: str) -> Any:
        """export_index(), remembered per compiled component for as long as it lives."""
        with self._exports_lock:
            known = self._exports.setdefault(component, {})
            if (interface, func) not in known:
                known[(interface, func)] = export_index(component, interface, func)
            return known[(interface, func)]

    def _check_paths(self, cfg: GuestConfig, kind: str) -> Path:
        # os.path, not pathlib: these two checks run on every call, and pathlib's objects cost
        # a few times the stat itself.
        path = cfg.wasm_path
        if not os.path.isfile(path):
            if kind == "capsule":
                raise MurError("E-RUN-004", f"capsule wasm not found: {path}",
                               "build the capsule component first (see docs/wasm.md)")
            raise MurError("E-RUN-008", f"{kind} '{cfg.label}' component not found: {path}",
                           f"run `mur install` or rebuild the {kind}")
        if cfg.preopen is not None and not os.path.isdir(cfg.preopen):
            raise MurError("E-IO-001", f"preopen directory for {kind} '{cfg.label}' not found: {cfg.preopen}")
        return path if isinstance(path, Path) else Path(path)

    def _call(self, cfg: GuestConfig, kind: str, interface: str, func: str, args: tuple,
              invoke: Callable[[str, ToolInput], ToolResult] | None = None) -> Any:
        from wasmtime import Trap, WasmtimeError

        path = self._check_paths(cfg, kind)
        component = self.engine.component(path, kind=kind, label=cfg.label)
        deadline_at = time.monotonic() + float(cfg.limits.deadline_seconds)
        ctx = CallContext(
            kind=kind,
            label=cfg.label,
            http=OutboundHttp(list(cfg.http_allow), on_http=cfg.on_http, transport=cfg.http_transport,
                              deadline_at=deadline_at),
            invoke=invoke,
            shell=self.shell,
            request_input=self.request_input,
            on_chunk=self.on_chunk,
            run_inference=self.run_inference,
            catalog=self.catalog,
            on_send=self.on_send,
            engine=self.engine.engine,
        )
        output = _Output(Path(cfg.log_path) if cfg.log_path else None)
        failure: BaseException | None = None
        result: Any = None
        with guest_call(self.engine.engine, deadline_ticks(cfg.limits.deadline_seconds)):
            try:
                live = instantiate(self.engine, component, cfg, ctx, output.write)
            except BaseException as exc:
                output.close()
                raise interruption(exc) or exc
            try:
                target = live.func_at(self._export(component, interface, func))
                if target is None:
                    who = "capsule component" if kind == "capsule" else f"{kind} '{cfg.label}'"
                    raise GuestError("E-RUN-001", f"{who} does not export {interface}#{func}", kind="compile",
                                     hint=f"build it against the `{kind}` world in mur/wasm/wit (docs/wasm.md)")
                try:
                    result = target(live.store, *args)
                except (WasmtimeError, Trap, MurError, GuestInterrupted) as exc:
                    failure = exc
                except Exception as exc:  # a host import raised something unexpected: still E-RUN-001
                    if getattr(exc, "ends_task", False):  # e.g. an input wait that timed out: not the guest's fault
                        failure = exc
                    else:
                        failure = MurError("E-RUN-001", f"host import raised {type(exc).__name__}: {exc}")
                        failure.__cause__ = exc
                else:
                    try:
                        target.post_return(live.store)
                    except WasmtimeError:
                        pass  # wasmtime runs post-return itself in recent versions
            finally:
                # Closing the store drops the WASI context, so all guest output has reached `output`
                # before the failure is classified.
                live.close()
                output.close()
        interrupted = interruption(failure)  # Ctrl-C: one KeyboardInterrupt, not a trap (mur.wasm.interrupt)
        if interrupted is not None:
            raise interrupted
        if getattr(failure, "ends_task", False):
            raise failure
        if failure is not None:
            raise classify_call_failure(failure, kind=kind, label=cfg.label, limits=cfg.limits,
                                        stderr=output.text()) from failure
        return result
