"""The guard behind ``capabilities.resources.workdir_max_bytes`` (E-RUN-013): it notices the
ceiling was reached, names the bytes, and ends the session.

Where the kernel counts (a session disk, ``diskplan``), the guard only reads: ``fstatvfs`` of the
disk (what its own accounting says is in use) plus what the runtime itself holds for the tools on
the host (the shell logs, a running call's output spools). The disk is full when no block or no
inode is left: the tool's write already failed with ENOSPC, and the guard reports it.

Where nothing counts (``watcher``), the guard is the ceiling, after the fact: every interval it
sums ``st_blocks`` of every inode beneath the tools' trees (data, preallocated blocks, directories,
symlink targets, extended-attribute blocks; hard links once) and of the files the tools hold open
with no name left (``O_TMPFILE``, unlinked while open: found through ``/proc/<pid>/fd`` of the
session's processes), and counts the inodes. The walk is mur.fswalk's: iterative, any depth, a
bounded number of fds; a race or an error in one walk costs that walk, never the guard (the thread
catches everything, and starts again at the next interval). The interval is fixed: a big tree
slows a walk, never the next one's start.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from mur import fswalk
from mur.sandbox.diskplan import POLL_SECONDS


@dataclass(frozen=True)
class Reading:
    used: int  # bytes counted toward the ceiling
    inodes: int
    full: bool = False  # the kernel refuses the next block or inode (a session disk)
    detail: str = ""  # how the bytes split, for the E-RUN-013 message


def open_files(pids: Iterable[int], dev: int, proc: str = "/proc") -> tuple[int, int]:
    """(bytes, count) of regular files on ``dev`` that processes ``pids`` hold open with no name left."""
    seen: set[int] = set()
    total = 0
    for pid in pids:
        base = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(base)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"{base}/{fd}")
            except OSError:
                continue
            if st.st_dev == dev and st.st_nlink == 0 and stat.S_ISREG(st.st_mode) and st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total, len(seen)


def tree_reading(trees: Iterable[int], *, limit: int, inode_limit: int, pids: Callable[[], Iterable[int]] = tuple,
                 extra: Callable[[], int] = lambda: 0) -> Reading:
    """The watcher's reading: ``st_blocks`` of every inode beneath each tree fd, of the tools' open
    files with no name on the first tree's filesystem, and ``extra`` bytes the runtime holds."""
    trees = list(trees)
    used, inodes = extra(), 0
    parts = []
    for fd in trees:
        if used > limit or inodes > inode_limit:
            break
        found = fswalk.usage(fd, stop_above=limit - used, max_inodes=inode_limit - inodes)
        used += found.bytes
        inodes += found.inodes
    if trees and used <= limit:
        hidden, count = open_files(pids(), os.fstat(trees[0]).st_dev)
        used += hidden
        inodes += count
        if hidden:
            parts.append(f"{hidden} bytes in {count} open file(s) with no name")
    return Reading(used, inodes, full=inodes > inode_limit, detail="; ".join(parts))


class CeilingGuard:
    """A daemon thread taking ``read()`` every ``interval`` seconds; calls ``on_breach(reading)``
    once, when the reading is past ``limit`` bytes or ``full``."""

    def __init__(self, read: Callable[[], Reading], limit: int, on_breach: Callable[[Reading], None],
                 interval: float = POLL_SECONDS, log: Callable[[str], None] = lambda _m: None) -> None:
        self.read = read
        self.limit = limit
        self.on_breach = on_breach
        self.interval = interval
        self.log = log
        self.breach: Reading | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._errors = 0

    def check(self) -> Reading | None:
        """One reading now; returns it when past the ceiling (and fires the callback once)."""
        with self._lock:
            if self.breach is not None:
                return self.breach
            reading = self.read()
            if reading.used > self.limit or reading.full:
                self.breach = reading
        if self.breach is reading:
            self.on_breach(reading)
            return reading
        return None

    def _loop(self) -> None:
        next_at = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += self.interval
            try:
                if self.check() is not None:
                    return
            except BaseException as exc:  # a tool made this reading fail: the next one starts on time
                self._errors += 1
                if self._errors <= 3:
                    self.log(f"workdir ceiling: a reading failed ({exc!r}); the guard goes on")
            now = time.monotonic()
            if next_at < now:  # a reading took longer than the interval: the next starts at once
                next_at = now

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mur-workdir-ceiling", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
