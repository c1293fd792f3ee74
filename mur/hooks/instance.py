"""One hook component, instantiated once and reused for the whole session.

Upstream (capsule-runtime `hooks.rs`) instantiates every hook exactly once and keeps its Store for
the session, so a hook can keep state in memory across lifecycle calls (murmur-hook-eval collects
the tool calls it saw and scores them at on-session-end). `WasmHost` gives every call a fresh
Store, which would lose that state, so hooks get their own long-lived instance here, built
from the same pieces (`WasmEngine` compile cache, `build_linker` imports, store limits, epoch
deadlines, the failure classification of mur.wasm.limits), through mur.wasm.host.instantiate.

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
from mur.wasm.host import GuestConfig, LiveInstance, OutputTail, instantiate
from mur.wasm.http import OutboundHttp
from mur.wasm.interrupt import GuestInterrupted, check_armed, guest_call, interruption
from mur.wasm.limits import GuestError, classify_call_failure, deadline_ticks
from mur.wasm.callcontext import CallContext
from mur.wasm.linker import HOOK_LIFECYCLE, LIFECYCLE_FUNCS

REQUIRED = ("on-session-start", "on-inference", "on-tool-call", "on-shell", "on-compaction", "on-session-end")
MISSING = object()  # an optional export the component does not have


class HookLog:
    """Appends lines (host errors) and raw bytes (guest output) to one hook's log file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._tail = OutputTail()

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
            self._tail.add(data)
            self._append(bytes(data))

    def mark(self) -> None:
        with self._lock:
            self._tail.clear()

    def tail(self) -> str:
        with self._lock:
            return self._tail.text()


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
        self._live: LiveInstance | None = None
        self._funcs: dict[str, Any] = {}
        self._http: OutboundHttp | None = None
        self.instantiations = 0

    @property
    def name(self) -> str:
        return self.cfg.label

    def start(self) -> None:
        """Instantiate now (session launch), so a broken hook fails the launch, not a later event."""
        with self._lock:
            if self._live is None:
                self._guarded(self._instantiate)

    def _instantiate(self) -> None:
        cfg = self.cfg
        component = self.engine.component(Path(cfg.wasm_path), kind="hook", label=cfg.label)
        self._http = OutboundHttp(list(cfg.http_allow), on_http=cfg.on_http, transport=cfg.http_transport)
        ctx = CallContext(kind="hook", label=cfg.label, http=self._http, run_inference=self.run_inference,
                          engine=self.engine.engine)
        live = instantiate(self.engine, component, cfg, ctx, self.log.guest)
        funcs = {fn: func for fn in LIFECYCLE_FUNCS if (func := live.func(HOOK_LIFECYCLE, fn)) is not None}
        missing = [fn for fn in REQUIRED if fn not in funcs]
        if missing:
            exported = live.instance.get_export_index(live.store, HOOK_LIFECYCLE) is not None
            live.close()
            what = f"{HOOK_LIFECYCLE}#{missing[0]}" if exported else HOOK_LIFECYCLE
            raise GuestError("E-RUN-001", f"hook '{cfg.label}' does not export {what}", kind="compile",
                             hint="rebuild the hook against the `hook` world in mur/wasm/wit (docs/hooks.md)")
        self._live, self._funcs = live, funcs
        self.instantiations += 1

    def call(self, fn: str, record: Any) -> Any:
        """Call one lifecycle function; returns the lifted result (Variant = ok, str = err) or
        MISSING when an optional export is absent. Raises GuestError on a trap / limit, and
        KeyboardInterrupt (once) when Ctrl-C stopped it (mur.wasm.interrupt)."""
        if getattr(self._busy, "active", False):
            # A host import of this very call (e.g. run-inference) produced a trace event that maps
            # to a lifecycle call: a component instance cannot be re-entered.
            raise MurError("E-RUN-001", f"hook '{self.name}' cannot be re-entered from its own host call")
        with self._lock:
            return self._guarded(lambda: self._call(fn, record))

    def _guarded(self, body: Callable[[], Any]) -> Any:
        """`body` (guest code of this hook) as a guest call: Ctrl-C stops it through its epoch and
        comes out as one KeyboardInterrupt once wasmtime is out of the way (mur.wasm.interrupt)."""
        failure: BaseException | None = None
        result: Any = None
        with guest_call(self.engine.engine, deadline_ticks(float(self.cfg.limits.deadline_seconds))):
            try:
                result = body()
            except BaseException as exc:  # noqa: BLE001 - raised below, once the guest is out
                failure = exc
        stop = interruption(failure)  # Ctrl-C: one KeyboardInterrupt, not a trap (mur.wasm.interrupt)
        if stop is not None:
            if failure is not None:
                self._discard()  # a guest stopped mid-call cannot be entered again
            raise stop
        if failure is not None:
            raise failure
        return result

    def _call(self, fn: str, record: Any) -> Any:
        from wasmtime import Trap, WasmtimeError

        if self._live is None:
            self._instantiate()
            if self.instantiations > 1:
                self.log.line(f"hook '{self.name}' was instantiated again after a failure; "
                              "state it kept in memory was lost")
        func = self._funcs.get(fn)
        if func is None:
            return MISSING
        store = self._live.store
        seconds = float(self.cfg.limits.deadline_seconds)
        store.set_epoch_deadline(deadline_ticks(seconds))
        check_armed()  # an interrupt latched before this deadline existed would not stop the guest
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
        except GuestInterrupted:
            raise  # Ctrl-C or SIGTERM carried out of a host import: call() raises the original
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
        live, self._live = self._live, None
        self._funcs = {}
        if live is not None:
            try:
                live.close()
            except Exception:  # noqa: BLE001 - best effort
                pass

    def close(self) -> None:
        with self._lock:
            self._discard()
