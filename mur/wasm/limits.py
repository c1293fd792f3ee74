"""capabilities.limits for WASM guests: store limits, the epoch ticker, and trap -> MurError.

* memory_bytes / table_elements / instances are wasmtime store limits. A guest ``memory.grow``
  past memory_bytes returns -1 (the wasm spec forbids a trap there, and wasmtime-py has no
  ResourceLimiter hook), so the guest's allocator fails and the guest aborts with an ordinary
  ``unreachable`` trap. The host tells that apart from a panic by what the guest printed while
  dying: CPython's ``MemoryError``, Rust's ``memory allocation of N bytes failed``, C's
  ``out of memory``. In a wasm32 guest below 4 GiB an allocator only fails when the store refused
  to grow, so that evidence plus a trap means the limit fired. Instantiation-time refusals (initial
  memory, initial table, instance count) come back from wasmtime with their own messages.
* deadline_seconds is epoch interruption: one ticker thread per engine advances the epoch every
  TICK seconds, and each guest call gets a fresh ``ceil(deadline / TICK)``-tick budget. Epoch checks
  run only inside wasm, so time blocked in a host call counts but is interrupted only when control
  returns to the guest (the same as upstream).
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from typing import Any

from mur.errors import MurError

TICK_SECONDS = 0.01
WASM_PAGE = 65536

# Evidence, in a dying guest's stderr, that its allocator was refused memory.
_OOM_PATTERNS = (
    re.compile(r"\bMemoryError\b"),
    re.compile(r"memory allocation of (?P<bytes>\d+) bytes failed"),
    re.compile(r"\bout of memory\b", re.IGNORECASE),
)
_MIN_MEMORY = re.compile(r"memory minimum size of (?P<pages>\d+) pages exceeds memory limits")
_MIN_TABLE = re.compile(r"table minimum size of (?P<elems>\d+) elements exceeds table limits")
_INSTANCES = re.compile(r"instance count too high at (?P<count>\d+)")
_MISSING_IMPORT = "matching implementation was not found in the linker"
_PY_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)):? ?(.*)$")


class GuestError(MurError):
    """E-RUN-001 / E-RUN-002 from a guest. ``limit`` names the capabilities.limits field that
    fired (None for a plain trap); ``kind`` is "limit", "trap", "link" or "compile"."""

    def __init__(self, code: str, message: str, *, kind: str, limit: str | None = None,
                 hint: str | None = None, stderr: str = ""):
        super().__init__(code, message, hint)
        self.kind = kind
        self.limit = limit
        self.stderr = stderr


def deadline_ticks(seconds: float) -> int:
    """Epoch ticks for a deadline (never zero: zero would trap before the first instruction)."""
    return max(1, math.ceil(seconds / TICK_SECONDS))


def apply_store_limits(store: Any, limits: Any) -> None:
    """Set memory/table/instance caps on a fresh store (before instantiation)."""
    store.set_limits(
        memory_size=int(limits.memory_bytes),
        table_elements=int(limits.table_elements),
        instances=int(limits.instances),
    )


class EpochTicker:
    """Advances an engine's epoch every TICK_SECONDS from a daemon thread.

    Holds only a weak reference to the engine, so it never keeps one alive; the thread exits once
    the engine is gone or stop() is called.
    """

    def __init__(self, engine: Any):
        self._engine = weakref.ref(engine)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mur-wasm-epoch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(TICK_SECONDS):
            engine = self._engine()
            if engine is None:
                return
            engine.increment_epoch()
            del engine

    def stop(self) -> None:
        self._stop.set()


def _subject(kind: str, label: str) -> str:
    return "capsule execution" if kind == "capsule" else f"{kind} '{label}'"


def _trap_cause(message: str) -> str:
    """The innermost cause wasmtime reports (the last non-empty line)."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    if not lines:
        return "unknown error"
    last = lines[-1]
    return re.sub(r"^\d+:\s*", "", last)


def _guest_exception(stderr: str) -> str | None:
    """The last Python-style exception line the guest printed (e.g. ``RuntimeError: boom``)."""
    for line in reversed(stderr.splitlines()):
        m = _PY_EXCEPTION.match(line.strip())
        if m:
            return line.strip()
    return None


def _oom_evidence(stderr: str) -> tuple[bool, int | None]:
    requested = None
    found = False
    for pattern in _OOM_PATTERNS:
        m = pattern.search(stderr)
        if m:
            found = True
            if "bytes" in pattern.groupindex:
                requested = int(m.group("bytes"))
    return found, requested


def classify_call_failure(exc: BaseException, *, kind: str, label: str, limits: Any,
                          stderr: str = "") -> GuestError:
    """Map a failed guest call (a WasmtimeError, or an error a host import raised) to E-RUN-001."""
    from wasmtime import ExitTrap

    subject = _subject(kind, label)
    message = str(exc)
    if "wasm trap: interrupt" in message:
        secs = limits.deadline_seconds
        return GuestError(
            "E-RUN-001",
            f"{subject} exceeded its {secs}s deadline and was interrupted "
            f"(capabilities.limits.deadline_seconds)",
            kind="limit", limit="deadline_seconds", stderr=stderr,
            hint="raise capabilities.limits.deadline_seconds in murmur.yaml if the work is legitimate",
        )
    oom, requested = _oom_evidence(stderr)
    if oom and not isinstance(exc, MurError):
        extra = f"; it asked for {requested} more bytes" if requested else ""
        return GuestError(
            "E-RUN-001",
            f"{subject} exceeded capabilities.limits.memory_bytes ({limits.memory_bytes} bytes): "
            f"linear memory growth past the limit was refused and the guest aborted{extra}",
            kind="limit", limit="memory_bytes", stderr=stderr,
            hint="raise capabilities.limits.memory_bytes in murmur.yaml if the guest legitimately needs more",
        )
    if isinstance(exc, ExitTrap):
        cause = f"guest exited with status {exc.code}"
    elif isinstance(exc, MurError):
        cause = exc.message
    else:
        cause = _trap_cause(message)
    guest = _guest_exception(stderr)
    if guest and guest not in cause:
        cause = f"{cause} (guest: {guest})"
    return GuestError("E-RUN-001", f"{subject} trapped: {cause}", kind="trap", stderr=stderr)


def classify_instantiate_failure(exc: BaseException, *, kind: str, label: str, limits: Any) -> GuestError:
    """Map a failed instantiation: a missing import (E-RUN-002) or a store limit (E-RUN-001)."""
    subject = _subject(kind, label)
    message = str(exc)
    first = message.strip().splitlines()[0] if message.strip() else "unknown error"
    if _MISSING_IMPORT in message:
        return GuestError(
            "E-RUN-002", f"{subject}: {first}", kind="link",
            hint="mur links WASI p2 (cli, io, clocks, random, filesystem, sockets with no network), "
                 "wasi:http's outgoing handler and the murmur:* interfaces in docs/wasm.md",
        )
    m = _MIN_MEMORY.search(message)
    if m:
        want = int(m.group("pages")) * WASM_PAGE
        return GuestError(
            "E-RUN-001",
            f"{subject} exceeded capabilities.limits.memory_bytes ({limits.memory_bytes} bytes): "
            f"its initial linear memory is {want} bytes",
            kind="limit", limit="memory_bytes",
        )
    m = _MIN_TABLE.search(message)
    if m:
        return GuestError(
            "E-RUN-001",
            f"{subject} exceeded capabilities.limits.table_elements ({limits.table_elements}): "
            f"its initial table has {m.group('elems')} elements",
            kind="limit", limit="table_elements",
        )
    m = _INSTANCES.search(message)
    if m:
        return GuestError(
            "E-RUN-001",
            f"{subject} exceeded capabilities.limits.instances ({limits.instances}): "
            f"instantiation needed instance number {m.group('count')}",
            kind="limit", limit="instances",
        )
    if "wasm trap: interrupt" in message:
        return classify_call_failure(exc, kind=kind, label=label, limits=limits)
    return GuestError("E-RUN-001", f"{subject} failed to instantiate: {first}", kind="trap")
