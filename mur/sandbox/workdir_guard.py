"""The periodic workdir-size check behind ``capabilities.resources.workdir_max_bytes`` (E-RUN-013).

A breach is caught within one poll interval, not at the instant it happens (spec). Size is the sum
of apparent file sizes (``st_size``) with each inode counted once, so hard links do not inflate it
and a sparse file counts at its full length (the conservative choice for a size ceiling).
"""

from __future__ import annotations

import stat
import threading
import time
from typing import Callable

from mur.fsafe import Tree

POLL_SECONDS = 0.5  # internal constant, not a manifest key (spec)


def tree_size(root: str | Tree, stop_above: int | None = None) -> int:
    """Total apparent size of regular files under ``root``, walked through directory fds: no
    symlink is followed and no directory a tool swaps for a link mid-walk is entered.

    Stops early once ``stop_above`` is exceeded: the caller only needs to know it was.
    """
    tree = root if isinstance(root, Tree) else Tree(root)
    total = 0
    seen: set[tuple[int, int]] = set()
    try:
        for _fd, _name, st in tree.walk():
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += st.st_size
            if stop_above is not None and total > stop_above:
                return total
    finally:
        if tree is not root:
            tree.close()
    return total


class WorkdirGuard:
    """A daemon thread polling the workdir size; calls ``on_exceeded(size)`` once on breach."""

    def __init__(self, root: str, limit: int, on_exceeded: Callable[[int], None],
                 interval: float = POLL_SECONDS, also: tuple[str, ...] = (),
                 pending: Callable[[], int] = lambda: 0) -> None:
        self.root = root
        self.also = also  # more trees the tools fill (the session's shell logs), counted in the same total
        # bytes the tools have made the runtime hold in no tree (a running call's unnamed output
        # spools): a tool printing without end must not fill the disk before its log exists
        self.pending = pending
        self.limit = limit
        self.interval = interval
        self.on_exceeded = on_exceeded
        self.exceeded_size: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> int | None:
        """One poll now; returns the size when over the limit (and fires the callback once)."""
        size = self.pending()
        for root in (self.root, *self.also):
            if size > self.limit:
                break
            size += tree_size(root, stop_above=self.limit - size)
        if size > self.limit:
            if self.exceeded_size is None:
                self.exceeded_size = size
                self.on_exceeded(size)
            return size
        return None

    def _loop(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            began = time.monotonic()
            if self.check() is not None:
                return
            # a huge workdir must not turn the guard into a CPU hog: poll at most ~10% duty
            wait = max(self.interval, 10 * (time.monotonic() - began))

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="mur-workdir-guard", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
