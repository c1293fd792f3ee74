"""One call's output: read the tool's stdout and stderr until it exits (or its deadline), then drain.

The spawner's exit report (a frame on its control socket) wakes the same poll as the pipes, so a
call costs no polling latency; the timeouts below only bound how long a lost spawner or a leftover
holding a pipe can keep the caller.
"""

from __future__ import annotations

import math
import os
import select
import signal
import threading
import time
from typing import IO

from mur.sandbox.output import Capture
from mur.sandbox.spawn import Call

DRAIN_SECONDS = 0.5  # after the tool exits, how long its leftovers may keep our pipes open
KILL_GRACE_SECONDS = 10.0  # after a timeout kill, how long the spawner may take to report the exit


def pump(call: Call, out: Capture, err: Capture, stdin: bytes | None, deadline: float) -> bool:
    """Read both pipes until the tool exits (or the deadline), then drain; returns timed_out."""
    if stdin is not None and call.stdin is not None:
        threading.Thread(target=feed_stdin, args=(os.fdopen(call.stdin, "wb"), stdin), daemon=True).start()
        call.stdin = None  # the feeder owns (and closes) it
    # poll, not a selector: no epoll fd to create, register and close on every call
    poller = select.poll()
    captures = {call.stdout: out, call.stderr: err}
    for fd in captures:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    poller.register(call.exit_fd, select.POLLIN)
    pipes = len(captures)
    timed_out = exited = False
    drain_until = 0.0
    try:
        while True:
            now = time.monotonic()
            if exited and (pipes == 0 or now >= drain_until):
                break  # past the drain, something that left our process group still holds a pipe
            if not exited and call.spawner.pid is None:  # close() from another thread stopped it
                call.abandon()
                break
            if not exited and now >= deadline:
                if timed_out and now >= deadline + KILL_GRACE_SECONDS:
                    call.abandon()  # the spawner never reported the killed tool's exit
                    break
                timed_out = True
                killpg(call.pid)  # again while it lasts: the group may still be forking
            if exited:
                wait = drain_until - now
            else:
                # bounded, so a spawner stopped by close() is noticed (its fd left the poller)
                wait = min(max(0.0, deadline - now), 0.5) if not timed_out else 0.05
            for fd, _event in poller.poll(max(0, math.ceil(wait * 1000))):
                if fd not in captures:  # the exit report: the spawner killed what was left of the group
                    poller.unregister(fd)
                    call.reap()
                    exited = True
                    drain_until = time.monotonic() + DRAIN_SECONDS
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if chunk:
                    captures[fd].feed(chunk)
                else:
                    poller.unregister(fd)
                    pipes -= 1
    finally:
        for fd in (call.stdout, call.stderr) + ((call.stdin,) if call.stdin is not None else ()):
            os.close(fd)
    return timed_out


def feed_stdin(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

