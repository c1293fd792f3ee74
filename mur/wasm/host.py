"""Instantiate a guest component and call it, with its grants, limits and error mapping.

Each call gets a fresh Store (its own WASI context, store limits and deadline) and a Linker whose
host imports close over that call's grants; components come compiled from the engine's cache.
Failures become one of:

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.fsafe import open_append
from mur.wasm.engine import WasmEngine, default_engine
from mur.wasm.http import OutboundHttp
from mur.wasm.limits import (
    GuestError,
    apply_store_limits,
    classify_call_failure,
    classify_instantiate_failure,
    deadline_ticks,
)
from mur.wasm.linker import CAPSULE_RUN, TOOL_RUN, CallContext, build_linker
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


class _Output:
    """Guest stdout/stderr: the tail kept for error messages, everything appended to a log."""

    def __init__(self, log_path: Path | None):
        self._lock = threading.Lock()
        self._tail = bytearray()
        self._log = None
        if log_path is not None:
            try:
                log_path.parent.mkdir(parents=True, exist_ok=True)
                self._log = os.fdopen(open_append(log_path), "ab")  # never through a link
            except OSError:
                self._log = None

    def write(self, data: bytes) -> None:
        with self._lock:
            self._tail += data
            if len(self._tail) > OUTPUT_TAIL_BYTES:
                del self._tail[: len(self._tail) - OUTPUT_TAIL_BYTES]
            if self._log is not None:
                try:
                    self._log.write(data)
                    self._log.flush()
                except OSError:
                    pass

    def text(self) -> str:
        with self._lock:
            return self._tail.decode("utf-8", errors="replace")

    def close(self) -> None:
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None


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
    ):
        self.shell = shell
        self.request_input = request_input
        self.engine = engine or default_engine()
        self.on_chunk = on_chunk
        self.run_inference = run_inference

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

    def call_export(self, cfg: GuestConfig, interface: str, func: str, *args: Any, kind: str = "hook") -> Any:
        """Call any exported function (e.g. a hook's murmur:hook/lifecycle@0.5.0 handler)."""
        return self._call(cfg, kind, interface, func, args)

    def precompile(self, wasm_path: Path, *, kind: str = "tool", label: str = "") -> None:
        """Compile (or load from cache) ahead of the first call, e.g. while staging."""
        self.engine.component(Path(wasm_path), kind=kind, label=label)

    # -- machinery ----------------------------------------------------------------------------

    def _check_paths(self, cfg: GuestConfig, kind: str) -> Path:
        path = Path(cfg.wasm_path)
        if not path.is_file():
            if kind == "capsule":
                raise MurError("E-RUN-004", f"capsule wasm not found: {path}",
                               "build the capsule component first (see docs/wasm.md)")
            raise MurError("E-RUN-008", f"{kind} '{cfg.label}' component not found: {path}",
                           f"run `mur install` or rebuild the {kind}")
        if cfg.preopen is not None and not Path(cfg.preopen).is_dir():
            raise MurError("E-IO-001", f"preopen directory for {kind} '{cfg.label}' not found: {cfg.preopen}")
        return path

    def _call(self, cfg: GuestConfig, kind: str, interface: str, func: str, args: tuple,
              invoke: Callable[[str, ToolInput], ToolResult] | None = None) -> Any:
        from wasmtime import Store, Trap, WasiConfig, WasmtimeError

        path = self._check_paths(cfg, kind)
        component = self.engine.component(path, kind=kind, label=cfg.label)
        self.engine.start_ticker()
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
        )
        engine = self.engine.engine
        linker = build_linker(engine, ctx)
        output = _Output(Path(cfg.log_path) if cfg.log_path else None)
        store = Store(engine)
        failure: BaseException | None = None
        stage = "instantiate"
        result: Any = None
        try:
            wasi = WasiConfig()
            wasi.argv = [cfg.label]
            wasi.env = [(str(k), str(v)) for k, v in cfg.env]
            if cfg.preopen is not None:
                wasi.preopen_dir(str(cfg.preopen), ".")
            wasi.stdout_custom = output.write
            wasi.stderr_custom = output.write
            store.set_wasi(wasi)
            apply_store_limits(store, cfg.limits)
            store.set_epoch_deadline(deadline_ticks(cfg.limits.deadline_seconds))
            try:
                instance = linker.instantiate(store, component)
            except (WasmtimeError, Trap) as exc:
                failure = exc
            else:
                stage = "call"
                target = self._export(store, instance, interface, func, kind, cfg.label)
                try:
                    result = target(store, *args)
                except (WasmtimeError, Trap, MurError) as exc:
                    failure = exc
                except Exception as exc:  # a host import raised something unexpected: still E-RUN-001
                    failure = MurError("E-RUN-001", f"host import raised {type(exc).__name__}: {exc}")
                    failure.__cause__ = exc
                else:
                    try:
                        target.post_return(store)
                    except WasmtimeError:
                        pass  # wasmtime runs post-return itself in recent versions
        finally:
            # Closing the store drops the WASI context, so all guest output has reached `output`
            # before the failure is classified.
            store.close()
            linker.close()
            output.close()
        if failure is not None:
            if stage == "instantiate":
                raise classify_instantiate_failure(failure, kind=kind, label=cfg.label,
                                                   limits=cfg.limits) from failure
            raise classify_call_failure(failure, kind=kind, label=cfg.label, limits=cfg.limits,
                                        stderr=output.text()) from failure
        return result

    @staticmethod
    def _export(store: Any, instance: Any, interface: str, func: str, kind: str, label: str) -> Any:
        idx = instance.get_export_index(store, interface)
        fidx = instance.get_export_index(store, func, idx) if idx is not None else None
        target = instance.get_func(store, fidx) if fidx is not None else None
        if target is None:
            who = "capsule component" if kind == "capsule" else f"{kind} '{label}'"
            raise GuestError("E-RUN-001", f"{who} does not export {interface}#{func}", kind="compile",
                             hint=f"build it against the `{kind}` world in mur/wasm/wit (docs/wasm.md)")
        return target
