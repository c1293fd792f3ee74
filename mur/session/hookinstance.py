"""One hook component, instantiated once and reused for the whole session.

Upstream (capsule-runtime `hooks.rs`) instantiates every hook exactly once and keeps its Store for
the session, so a hook can keep state in memory across lifecycle calls (murmur-hook-eval collects
the tool calls it saw and scores them at on-session-end). `WasmHost.call_export` gives every call a
fresh Store, which would lose that state, so hooks get their own long-lived instance here, built
from the same pieces (`WasmEngine` compile cache, `build_linker` imports, store limits, epoch
deadlines, the failure classification of mur.wasm.limits).

* Every call gets a fresh `deadline_seconds` budget (epoch deadline reset per call) and a fresh
  HTTP deadline; memory/table/instance limits apply to the store as a whole.
* Calls are serialized by a lock: a Store is used by one thread at a time.
* After a trap or a deadline the instance is discarded (wasmtime refuses to re-enter a trapped
  component); the next call instantiates it again — its in-memory state is gone, which is logged.
* Guest stdout/stderr are appended to the hook's log (`logs/hook-<name>.log`), so a hook without
  any filesystem grant can still report (e.g. murmur-hook-eval's "MURMUR_EVAL_CONFIG is not set").
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.fsafe import open_append
from mur.wasm.engine import WasmEngine
from mur.wasm.host import GuestConfig
from mur.wasm.http import OutboundHttp
from mur.wasm.limits import (
    GuestError,
    apply_store_limits,
    classify_call_failure,
    classify_instantiate_failure,
    deadline_ticks,
)
from mur.wasm.linker import HOOK_LIFECYCLE, LIFECYCLE_FUNCS, CallContext, build_linker

REQUIRED = ("on-session-start", "on-inference", "on-tool-call", "on-shell", "on-compaction", "on-session-end")
TAIL_BYTES = 64 * 1024
MISSING = object()  # an optional export the component does not have


class HookLog:
    """Appends lines (host errors) and raw bytes (guest output) to one hook's log file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._tail = bytearray()

    def _append(self, data: bytes) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with os.fdopen(open_append(self.path), "ab") as fh:  # never through a link
                fh.write(data)
        except OSError:
            pass  # a log we cannot write must never break the session

    def line(self, message: str) -> None:
        with self._lock:
            self._append((message.rstrip("\n") + "\n").encode("utf-8", errors="replace"))

    def guest(self, data: bytes) -> None:
        with self._lock:
            self._tail += data
            if len(self._tail) > TAIL_BYTES:
                del self._tail[: len(self._tail) - TAIL_BYTES]
            self._append(bytes(data))

    def mark(self) -> None:
        with self._lock:
            self._tail.clear()

    def tail(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", errors="replace")


class HookInstance:
    """A long-lived instance of one hook component."""

    def __init__(self, engine: WasmEngine, cfg: GuestConfig, log: HookLog,
                 run_inference: Callable[[Any], Any] | None = None):
        self.engine = engine
        self.cfg = cfg
        self.log = log
        self.run_inference = run_inference
        self._lock = threading.RLock()
        self._busy = threading.local()
        self._store: Any = None
        self._linker: Any = None
        self._funcs: dict[str, Any] = {}
        self._http: OutboundHttp | None = None
        self.instantiations = 0

    @property
    def name(self) -> str:
        return self.cfg.label

    def start(self) -> None:
        """Instantiate now (session launch), so a broken hook fails the launch, not a later event."""
        with self._lock:
            if self._store is None:
                self._instantiate()

    def _instantiate(self) -> None:
        from wasmtime import Store, Trap, WasiConfig, WasmtimeError

        cfg = self.cfg
        component = self.engine.component(Path(cfg.wasm_path), kind="hook", label=cfg.label)
        self.engine.start_ticker()
        self._http = OutboundHttp(list(cfg.http_allow), on_http=cfg.on_http, transport=cfg.http_transport)
        ctx = CallContext(kind="hook", label=cfg.label, http=self._http, run_inference=self.run_inference)
        linker = build_linker(self.engine.engine, ctx)
        store = Store(self.engine.engine)
        wasi = WasiConfig()
        wasi.argv = [cfg.label]
        wasi.env = [(str(k), str(v)) for k, v in cfg.env]
        if cfg.preopen is not None:
            wasi.preopen_dir(str(cfg.preopen), ".")
        wasi.stdout_custom = self.log.guest
        wasi.stderr_custom = self.log.guest
        store.set_wasi(wasi)
        apply_store_limits(store, cfg.limits)
        store.set_epoch_deadline(deadline_ticks(cfg.limits.deadline_seconds))
        try:
            instance = linker.instantiate(store, component)
        except (WasmtimeError, Trap) as exc:
            store.close()
            linker.close()
            raise classify_instantiate_failure(exc, kind="hook", label=cfg.label, limits=cfg.limits) from exc
        funcs: dict[str, Any] = {}
        idx = instance.get_export_index(store, HOOK_LIFECYCLE)
        for fn in LIFECYCLE_FUNCS:
            fidx = instance.get_export_index(store, fn, idx) if idx is not None else None
            func = instance.get_func(store, fidx) if fidx is not None else None
            if func is not None:
                funcs[fn] = func
        missing = [fn for fn in REQUIRED if fn not in funcs]
        if missing:
            store.close()
            linker.close()
            what = HOOK_LIFECYCLE if idx is None else f"{HOOK_LIFECYCLE}#{missing[0]}"
            raise GuestError("E-RUN-001", f"hook '{cfg.label}' does not export {what}", kind="compile",
                             hint="rebuild the hook against the `hook` world in mur/wasm/wit (docs/hooks.md)")
        self._store, self._linker, self._funcs = store, linker, funcs
        self.instantiations += 1

    def call(self, fn: str, record: Any) -> Any:
        """Call one lifecycle function; returns the lifted result (Variant = ok, str = err) or
        MISSING when an optional export is absent. Raises GuestError on a trap / limit."""
        from wasmtime import Trap, WasmtimeError

        if getattr(self._busy, "active", False):
            # A host import of this very call (e.g. run-inference) produced a trace event that maps
            # to a lifecycle call: a component instance cannot be re-entered.
            raise MurError("E-RUN-001", f"hook '{self.name}' cannot be re-entered from its own host call")
        with self._lock:
            if self._store is None:
                self._instantiate()
                if self.instantiations > 1:
                    self.log.line(f"hook '{self.name}' was instantiated again after a failure; "
                                  "state it kept in memory was lost")
            func = self._funcs.get(fn)
            if func is None:
                return MISSING
            store = self._store
            seconds = float(self.cfg.limits.deadline_seconds)
            store.set_epoch_deadline(deadline_ticks(seconds))
            if self._http is not None:
                self._http.deadline_at = time.monotonic() + seconds
            self.log.mark()
            self._busy.active = True
            try:
                result = func(store, record)
                try:
                    func.post_return(store)
                except WasmtimeError:
                    pass  # recent wasmtime runs post-return itself
                return result
            except (WasmtimeError, Trap, MurError) as exc:
                self._discard()
                raise classify_call_failure(exc, kind="hook", label=self.name, limits=self.cfg.limits,
                                            stderr=self.log.tail()) from exc
            except Exception as exc:  # a host import raised something unexpected
                self._discard()
                raise GuestError("E-RUN-001", f"hook '{self.name}' {fn} failed: {type(exc).__name__}: {exc}",
                                 kind="trap") from exc
            finally:
                self._busy.active = False

    def _discard(self) -> None:
        store, linker = self._store, self._linker
        self._store = self._linker = None
        self._funcs = {}
        for obj in (store, linker):
            if obj is not None:
                try:
                    obj.close()
                except Exception:  # noqa: BLE001 - best effort
                    pass

    def close(self) -> None:
        with self._lock:
            self._discard()
