"""Ctrl-C while guest code runs: held back until wasmtime is out of the way, then one KeyboardInterrupt.

Python runs a signal handler between bytecodes of the main thread. While a guest runs, the main
thread's Python code is wasmtime-py's glue and the host imports, all called from ctypes
trampolines. wasmtime-py turns an ``Exception`` raised there into a trap and re-raises it after the
call, but a ``KeyboardInterrupt`` escapes the trampoline: ctypes prints "Exception ignored on
calling ctypes callback", hands wasmtime no result, and the call fails with a misleading "type
mismatch" trap. While the guest is in compiled code no Python handler runs at all until it returns.

So while :func:`deferred_sigint` is in force (``mur run``), SIGINT is handled here:

* outside guest code, the previous handler runs (KeyboardInterrupt, as always);
* inside a host import (:func:`host_import` wraps each one), the handler raises too, and the
  wrapper turns whatever BaseException comes out (KeyboardInterrupt, the lifecycle's Terminated)
  into :class:`GuestInterrupted`, an Exception: wasmtime-py traps the guest with it and re-raises
  it after the call, and the host raises the original;
* anywhere else inside a guest call the interrupt is latched and the guest is stopped through its
  epoch deadline: the engine's epoch is advanced past the longest deadline in flight (one
  ``increment_epoch`` per tick: about 1 µs each, 66 ms at the default 600 s), so the guest traps at
  its next epoch check. A thread reading the signal wakeup fd does this while compiled code keeps
  the main thread from running any handler. A host import the guest calls meanwhile traps at once;
* the latched interrupt is delivered once, as KeyboardInterrupt, when the guest call returns or traps;
* a Store made after the epoch was advanced has a fresh deadline that the advance never reached, so
  :func:`check_armed` runs between setting a store's deadline and entering its guest: an interrupt
  latched by then stops the call before any guest code runs (seen: a Ctrl-C landing while the
  capsule was being instantiated let it spin to its deadline).

:func:`raise_soon` does the same for another exception a signal handler wants to raise (the
lifecycle's Terminated when SIGTERM's grace is over).

After that first KeyboardInterrupt, and inside :func:`held`, further SIGINTs are only remembered
until :func:`deferred_sigint` exits: teardown (sandboxed processes killed, cgroups removed, the
trace closed) must not be cut short.

Only the main thread's guest calls are tracked: it is the only thread signal handlers run on.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from typing import Any, Callable, Iterator

GUEST = "guest"  # wasm code or wasmtime-py's glue: a KeyboardInterrupt here would escape a trampoline
HOST = "host"  # the body of one of our host imports: a KeyboardInterrupt is caught by its wrapper


class GuestInterrupted(Exception):
    """Carries a BaseException raised inside a host import out through wasmtime, as a trap."""

    def __init__(self, original: BaseException | None):
        super().__init__("the run was interrupted")
        self.original = original


class _Gate:
    """Where the main thread is (a stack of GUEST/HOST frames) and whether an interrupt waits."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, Any, int]] = []  # (state, wasmtime Engine, deadline ticks)
        self.installed = False
        self.latched = False  # a SIGINT arrived during this deferred_sigint()
        self.delivered = False  # ...and its one KeyboardInterrupt has been raised
        self.holding = False  # inside held(): remembered, never raised
        self.deferred: BaseException | None = None  # raise_soon()'s exception, waiting for the guest to stop
        self._stopped = False

    @staticmethod
    def on_main() -> bool:
        return threading.current_thread() is threading.main_thread()

    def enter(self, state: str, engine: Any = None, ticks: int = 0) -> int | None:
        """Push a frame (main thread only); the mark to :meth:`leave` with."""
        if not self.on_main():
            return None
        self.frames.append((state, engine, ticks))
        return len(self.frames) - 1

    def leave(self, mark: int | None) -> None:
        """Drop the frame at `mark` and any a skipped leave() left above it."""
        if mark is not None:
            del self.frames[mark:]

    def in_guest(self) -> bool:
        try:  # read from the watcher thread too, while the main thread pushes and pops
            return self.frames[-1][0] == GUEST
        except IndexError:
            return False

    def pending(self) -> bool:
        """An interrupt is latched and not yet raised (only the main thread ever gets it)."""
        sigint = self.installed and self.latched and not self.delivered
        return (sigint or self.deferred is not None) and self.on_main()

    def take(self) -> BaseException | None:
        """The waiting exception, once: the caller raises it."""
        if not self.pending():
            return None
        if self.deferred is not None:
            exc, self.deferred = self.deferred, None
            return exc
        self.delivered = True
        return KeyboardInterrupt()

    def latch(self) -> None:
        """Remember the interrupt and stop the guest the main thread is running, if any."""
        if self.delivered or not self.installed:
            return
        self.latched = True
        if self.in_guest() and not self._stopped:
            self._stopped = True
            self._stop_guests(list(self.frames))

    @staticmethod
    def _stop_guests(frames: list[tuple[str, Any, int]]) -> None:
        # Deadlines are relative epochs: advancing by the longest budget in flight reaches them all.
        budgets: dict[int, tuple[Any, int]] = {}
        for _, engine, ticks in frames:
            if engine is not None:
                budgets[id(engine)] = (engine, max(ticks, budgets.get(id(engine), (engine, 0))[1]))
        for engine, ticks in budgets.values():
            for _ in range(ticks + 1):
                engine.increment_epoch()

    def reset(self) -> None:
        self.latched = self.delivered = self._stopped = False
        self.deferred = None


gate = _Gate()


@contextlib.contextmanager
def guest_call(engine: Any, ticks: int) -> Iterator[None]:
    """Mark the main thread as running guest code of `engine` (deadline `ticks`) for the block."""
    mark = gate.enter(GUEST, engine, ticks)
    try:
        yield
    finally:
        gate.leave(mark)


def interruption(failure: BaseException | None) -> BaseException | None:
    """What a finished guest call raises instead of its result or `failure`: the original exception
    a host import carried out, or the latched interrupt; None when the call was not interrupted."""
    if isinstance(failure, GuestInterrupted) and failure.original is not None:
        return failure.original
    latched = gate.take()
    if latched is not None:
        return latched
    if isinstance(failure, GuestInterrupted):  # latched, but delivered by an inner call already
        return KeyboardInterrupt()
    return None


def check_armed() -> None:
    """Call once a new Store's epoch deadline is set, before guest code runs in it. An interrupt
    latched earlier in the same guest call (while the store was being made) advanced the epoch
    before this deadline existed, so it would not stop this guest: it must not start at all."""
    if gate.pending():
        raise GuestInterrupted(None)


def raise_soon(exc: BaseException) -> None:
    """For a signal handler: raise `exc` into the main thread now, or, when it is inside guest code,
    stop the guest and have the guest call raise it (SIGTERM's Terminated, through the lifecycle)."""
    if not gate.in_guest():
        raise exc
    gate.deferred = exc
    gate._stop_guests(list(gate.frames))


def host_import(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as a host import: never lets a BaseException reach wasmtime-py's trampoline, and traps
    the guest at once while an interrupt is latched."""

    @functools.wraps(fn)
    def call(*args: Any) -> Any:
        try:
            if gate.pending():
                raise GuestInterrupted(None)
            mark = gate.enter(HOST)
            try:
                result = fn(*args)
            finally:
                gate.leave(mark)
            if gate.pending():
                raise GuestInterrupted(None)
            return result
        except Exception:
            raise
        except BaseException as exc:  # KeyboardInterrupt, Terminated: through wasmtime as a trap
            raise GuestInterrupted(exc) from None

    return call


def _handler(previous: Any) -> Callable[[int, Any], None]:
    def on_sigint(signum: int, frame: Any) -> None:
        if gate.delivered or gate.holding:
            gate.latched = True
            return  # tearing down: let it finish
        if gate.in_guest():
            gate.latch()
            return
        gate.latched = gate.delivered = True
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    return on_sigint


def _watch(fd: int) -> None:
    """The signal wakeup fd's reader: stops the guest while compiled code holds the main thread."""
    try:
        while True:
            data = os.read(fd, 64)
            if not data:
                return
            if signal.SIGINT in data:
                gate.latch()
    except OSError:
        return
    finally:
        os.close(fd)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """No KeyboardInterrupt from SIGINT during the block (teardown); `interrupted()` says if one came."""
    was, gate.holding = gate.holding, True
    try:
        yield
    finally:
        gate.holding = was


def interrupted() -> bool:
    """A SIGINT arrived since deferred_sigint() began (delivered or not)."""
    return gate.latched


@contextlib.contextmanager
def deferred_sigint() -> Iterator[None]:
    """SIGINT handled as the module docstring says, for the block (main thread only; a SIGINT the
    parent set to be ignored stays ignored)."""
    current = signal.getsignal(signal.SIGINT) if gate.on_main() else None
    if current in (None, signal.SIG_IGN) or gate.installed:
        yield
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    watcher = threading.Thread(target=_watch, args=(read_fd,), name="mur-sigint", daemon=True)
    watcher.start()
    gate.reset()
    gate.installed = True
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    try:
        signal.signal(signal.SIGINT, _handler(current))
        yield
    finally:
        signal.signal(signal.SIGINT, current)
        signal.set_wakeup_fd(previous_fd)
        gate.installed = False  # a byte the watcher reads late latches nothing now
        gate.reset()
        os.close(write_fd)  # the watcher reads EOF and exits
        watcher.join(5)
