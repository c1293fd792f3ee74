"""Ctrl-C while a real guest runs (mur.wasm.interrupt): a real SIGINT to this process, one
KeyboardInterrupt once wasmtime is out of the way, and none of ctypes' "Exception ignored" noise."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import pytest

from mur.manifest.capsule import Limits
from mur.manifest.network import parse_allow_list
from mur.wasm import interrupt
from mur.wasm.types import ToolInput

LONG = Limits(deadline_seconds=60)  # a test that fell back on the deadline would fail on its message


def sigint_after(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def call(host, cfg, **req):
    return host.call_tool(cfg, ToolInput(json.dumps(req)))


@pytest.fixture
def silent_server():
    """A TCP listener on 127.0.0.1 that accepts and never answers: an HTTP call to it blocks."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    yield sock.getsockname()[1]
    sock.close()


def assert_quiet(capfd) -> None:
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err


def test_a_busy_guest_is_stopped_through_its_epoch(host, make_cfg, probe_wasm, capfd):
    cfg = make_cfg(probe_wasm, limits=LONG)
    started = time.monotonic()
    with interrupt.deferred_sigint():
        timer = sigint_after(0.5)
        with pytest.raises(KeyboardInterrupt):
            call(host, cfg, op="loop")  # compiled code: no Python handler runs until it traps
        timer.join()
        assert interrupt.interrupted()
    # Not a speed check: without the epoch stop the loop runs into its 60 s deadline first.
    assert time.monotonic() - started < LONG.deadline_seconds / 2
    assert_quiet(capfd)


def test_an_interrupt_inside_a_blocking_host_import_traps_the_guest(host, make_cfg, probe_wasm, silent_server,
                                                                    capfd):
    cfg = make_cfg(probe_wasm, limits=LONG, http_allow=parse_allow_list([f"127.0.0.1:{silent_server}"]))
    with interrupt.deferred_sigint():
        timer = sigint_after(0.5)
        with pytest.raises(KeyboardInterrupt):
            call(host, cfg, op="http", url=f"http://127.0.0.1:{silent_server}/never")
        timer.join()
    assert_quiet(capfd)


def test_without_the_deferral_a_host_import_still_never_leaks_the_interrupt(host, make_cfg, probe_wasm,
                                                                           silent_server, capfd):
    """Python's own handler raises inside the import; the import's wrapper carries it out as a trap."""
    cfg = make_cfg(probe_wasm, limits=LONG, http_allow=parse_allow_list([f"127.0.0.1:{silent_server}"]))
    timer = sigint_after(1.0)  # by then the guest waits in its HTTP import (Python's handler raises anywhere)
    with pytest.raises(KeyboardInterrupt):
        call(host, cfg, op="http", url=f"http://127.0.0.1:{silent_server}/never")
    timer.join()
    assert_quiet(capfd)


def test_a_capsule_busy_in_a_tool_it_invoked_gets_one_interrupt(host, make_cfg, capsule_probe_wasm, probe_wasm,
                                                                capfd):
    """capsule -> murmur:tool-registry/invoke (a host import) -> a tool guest in a busy loop."""
    tool_cfg = make_cfg(probe_wasm, label="probe", limits=LONG, preopen=None)
    calls = []

    def invoke(name, data):
        calls.append(name)
        return host.call_tool(tool_cfg, data)

    (make_cfg.work / "task.md").write_text(json.dumps({"op": "invoke", "calls": [
        {"tool": "probe", "data": json.dumps({"op": "loop"})}]}))
    cfg = make_cfg(capsule_probe_wasm, label="cap", limits=LONG)
    started = time.monotonic()
    with interrupt.deferred_sigint():
        timer = sigint_after(0.8)
        with pytest.raises(KeyboardInterrupt):
            host.run_capsule(cfg, invoke)
        timer.join()
    assert time.monotonic() - started < LONG.deadline_seconds / 2  # stopped, not run into the deadline
    assert calls == ["probe"]
    assert not (make_cfg.work / "out" / "result.txt").exists()  # the capsule never got to write
    assert_quiet(capfd)


@pytest.mark.parametrize("how", ["sigint", "raise_soon"])
def test_an_interrupt_while_the_store_is_made_stops_the_guest_before_it_runs(host, make_cfg, probe_wasm,
                                                                            monkeypatch, capfd, how):
    """The signal lands inside the guest call but before the new store has its deadline: the epoch it
    advances is behind that deadline and would stop nothing, so the guest must never start (seen: a
    Ctrl-C while a forked capsule was instantiated let it spin to its deadline)."""

    class Forced(Exception):
        pass

    start_ticker = host.engine.start_ticker

    def start_then_signal():  # the first thing instantiate() does, before the Store exists
        start_ticker()
        if how == "sigint":
            signal.raise_signal(signal.SIGINT)  # its handler runs here, between bytecodes
        else:
            interrupt.raise_soon(Forced())

    monkeypatch.setattr(host.engine, "start_ticker", start_then_signal)
    cfg = make_cfg(probe_wasm, limits=LONG)
    with interrupt.deferred_sigint():
        with pytest.raises(KeyboardInterrupt if how == "sigint" else Forced):
            call(host, cfg, op="write", path="ran.txt", text="the guest ran")
    assert not (make_cfg.work / "ran.txt").exists()
    assert_quiet(capfd)


def test_after_the_interrupt_signals_wait_and_guests_run_normally(host, make_cfg, probe_wasm, capfd):
    """Teardown after Ctrl-C must not be cut short: a second SIGINT is only remembered."""
    cfg = make_cfg(probe_wasm, limits=LONG)
    with interrupt.deferred_sigint():
        timer = sigint_after(0.3)
        with pytest.raises(KeyboardInterrupt):
            call(host, cfg, op="loop")
        timer.join()
        os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode: ignored
        time.sleep(0.05)
        assert call(host, cfg, op="echo", payload="still here").status == "passed"
    # Outside the block Python's own handler is back.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert_quiet(capfd)


def test_held_keeps_an_interrupt_back_until_the_block_is_over(capfd):
    with interrupt.deferred_sigint():
        with interrupt.held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler has run by now, and raised nothing
        assert interrupt.interrupted()
    assert not interrupt.interrupted()  # the next deferred_sigint() starts clean


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupt.deferred_sigint():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_raise_soon_from_wasmtimes_own_callback_waits_until_the_guest_is_out(host, make_cfg, probe_wasm,
                                                                            monkeypatch, capfd):
    """A guest's stdout reaches us through wasmtime-py's WASI callback (not a host import of ours): an
    exception raised there would escape the trampoline; raise_soon (what SIGTERM's handler uses under
    `mur run`) stops the guest and raises once the call is over."""
    from mur.wasm import host as host_module

    class Forced(Exception):
        pass

    write = host_module._Output.write

    def write_then_signal(self, data):
        write(self, data)
        interrupt.raise_soon(Forced())  # as a signal handler running here would

    monkeypatch.setattr(host_module._Output, "write", write_then_signal)
    with pytest.raises(Forced):
        call(host, make_cfg(probe_wasm, limits=LONG), op="print", text="hello")
    monkeypatch.undo()
    assert call(host, make_cfg(probe_wasm, limits=LONG), op="echo", payload="x").status == "passed"  # nothing left over
    with pytest.raises(Forced):
        interrupt.raise_soon(Forced())  # outside guest code: at once
    assert_quiet(capfd)
