"""Walking, measuring and removing a tree a tool could have made: iteratively, at any depth, with a
bounded number of open descriptors, never following a link or leaving the filesystem.

A tool controls the shape of its workdir: a chain of directories 100,000 levels deep, a directory
of a million names, names longer than any path the kernel resolves at once. So nothing here
recurses (Python's stack ends near 1,000 frames) and nothing builds a path from the root (PATH_MAX
is 4,096 bytes): every step is relative to the directory above it, held by fd.

Descriptors: the first ``SHALLOW`` levels keep their fd (and a lazy listing) open, and so do the
``DEEP`` levels nearest the current one. A level in between gives its fd back when the walk goes
below it (its remaining names are read into a list first) and is opened again through ``..`` of its
child on the way back up, checked to be the same directory (device and inode). A tool that moves
a directory while the runtime walks it makes that check fail: the walk stops with ``Raced`` rather
than carry on somewhere else. At most ``2 * SHALLOW + DEEP + 2`` descriptors are open at once.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass
from typing import Iterator, NamedTuple

SHALLOW = 16
DEEP = 16
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_CHECK_EVERY = 256  # entries between two looks at the deadline


class Raced(OSError):
    """The tree changed under the walk in a way it cannot follow safely (a directory moved)."""


class WalkTimeout(TimeoutError):
    """The walk ran past its deadline."""


class Step(NamedTuple):
    """One step of a walk. ``kind``: "file" (anything but a directory), "enter" (a directory, given
    before its entries), "leave" (the same directory, after them). ``dirfd`` is the containing
    directory's fd, valid during this step only; ``st`` the entry's own lstat; ``depth`` 1 for the
    root's entries."""

    kind: str
    dirfd: int
    name: str
    st: os.stat_result
    depth: int


@dataclass
class _Level:
    fd: int  # -1 while given back
    dev: int
    ino: int
    name: str  # this directory's name in its parent ("" for the root)
    st: os.stat_result
    lazy: "os._ScandirIterator | None" = None  # type: ignore[name-defined]
    names: "list[str] | None" = None
    index: int = 0


class Walker:
    """``for step in Walker(fd): ...``; ``skip()`` after an "enter" step keeps the walk out of that
    directory (its "leave" step still comes). The root fd stays the caller's."""

    def __init__(self, root_fd: int, *, same_dev: bool = True, deadline: float | None = None) -> None:
        self.root_fd = root_fd
        self.same_dev = same_dev
        self.deadline = deadline
        self._skip = False
        self.entries = 0

    def skip(self) -> None:
        self._skip = True

    def __iter__(self) -> Iterator[Step]:
        st = os.fstat(self.root_fd)
        root = _Level(self.root_fd, st.st_dev, st.st_ino, "", st)
        root.lazy = os.scandir(self.root_fd)
        levels = [root]
        try:
            while levels:
                level = levels[-1]
                name = _next_name(level)
                if name is None:
                    levels.pop()
                    _close_listing(level)
                    if not levels:
                        break
                    parent = levels[-1]
                    if parent.fd < 0:
                        _reopen_parent(level, parent)
                    if level.fd >= 0:
                        os.close(level.fd)
                    yield Step("leave", parent.fd, level.name, level.st, len(levels))
                    continue
                self._tick()
                try:
                    est = os.stat(name, dir_fd=level.fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since it was listed
                depth = len(levels)
                if not stat.S_ISDIR(est.st_mode):
                    yield Step("file", level.fd, name, est, depth)
                    continue
                self._skip = False
                yield Step("enter", level.fd, name, est, depth)
                child = None
                if not self._skip and (not self.same_dev or est.st_dev == root.dev):
                    child = _open_child(level.fd, name, est)
                if child is None:
                    yield Step("leave", level.fd, name, est, depth)
                    continue
                new = _Level(child, est.st_dev, est.st_ino, name, est)
                if depth < SHALLOW:
                    new.lazy = os.scandir(child)
                else:
                    new.names = os.listdir(child)
                levels.append(new)
                _give_back(levels)
        finally:
            for level in levels:
                _close_listing(level)
                if level is not root and level.fd >= 0:
                    os.close(level.fd)

    def _tick(self) -> None:
        self.entries += 1
        if self.deadline is not None and self.entries % _CHECK_EVERY == 0 and time.monotonic() > self.deadline:
            raise WalkTimeout(f"gave up after {self.entries} entries: the walk ran past its deadline")


def _next_name(level: _Level) -> str | None:
    if level.lazy is not None:
        for entry in level.lazy:
            return entry.name
        return None
    assert level.names is not None
    if level.index >= len(level.names):
        return None
    level.index += 1
    return level.names[level.index - 1]


def _close_listing(level: _Level) -> None:
    if level.lazy is not None:
        level.lazy.close()
        level.lazy = None


def _open_child(dirfd: int, name: str, listed: os.stat_result) -> int | None:
    """The directory ``name`` opened without following a link, if it is still the one listed."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dirfd)
    except OSError:
        return None  # swapped for a link or a file, or removed: not entered
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (listed.st_dev, listed.st_ino):
        os.close(fd)
        return None
    return fd


def _give_back(levels: list[_Level]) -> None:
    """Close the fd of the level just above the DEEP window (its names are listed eagerly already)."""
    index = len(levels) - DEEP - 1
    if index >= SHALLOW:
        level = levels[index]
        if level.fd >= 0:
            os.close(level.fd)
            level.fd = -1


def _reopen_parent(child: _Level, parent: _Level) -> None:
    """Open ``parent`` again through ``..`` of ``child`` (still open), checking it is the same one."""
    fd = os.open("..", DIR_FLAGS, dir_fd=child.fd)
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (parent.dev, parent.ino):
        os.close(fd)
        raise Raced(errno.ESTALE, "a directory was moved while the runtime walked the tree", child.name)
    parent.fd = fd


def walk(root_fd: int, *, same_dev: bool = True, deadline: float | None = None) -> Iterator[Step]:
    """Every entry beneath ``root_fd`` (see ``Walker``)."""
    return iter(Walker(root_fd, same_dev=same_dev, deadline=deadline))


@dataclass
class Usage:
    """What a tree holds on disk: every block of every inode (``st_blocks``), each inode once."""

    bytes: int = 0
    inodes: int = 0
    complete: bool = True


def usage(root_fd: int, *, deadline: float | None = None, stop_above: int | None = None,
          max_inodes: int | None = None) -> Usage:
    """Blocks (``st_blocks * 512``: data, preallocation, directories, symlink targets, extended
    attribute blocks) and inodes beneath ``root_fd``, the root included, hard links counted once.
    Stops early once ``stop_above`` bytes or ``max_inodes`` inodes are passed (``complete`` False
    then, and on a race or a deadline)."""
    root = os.fstat(root_fd)
    found = Usage(root.st_blocks * 512, 1)
    seen: set[int] = set()
    try:
        for step in walk(root_fd, deadline=deadline):
            if step.kind == "leave":
                continue
            st = step.st
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if st.st_ino in seen:
                    continue
                seen.add(st.st_ino)
            found.bytes += st.st_blocks * 512
            found.inodes += 1
            if (stop_above is not None and found.bytes > stop_above) or \
                    (max_inodes is not None and found.inodes > max_inodes):
                found.complete = False
                return found
    except (Raced, WalkTimeout):
        found.complete = False
    return found


def remove_children(dirfd: int, *, deadline: float | None = None) -> int:
    """Remove everything beneath ``dirfd`` (never following a link; mount points and what another
    filesystem holds are left); returns how many entries could not be removed."""
    left = 0
    walker = Walker(dirfd, deadline=deadline)
    for step in walker:
        try:
            if step.kind == "file":
                os.unlink(step.name, dir_fd=step.dirfd)
            elif step.kind == "leave":
                os.rmdir(step.name, dir_fd=step.dirfd)
        except FileNotFoundError:
            pass
        except OSError:
            left += 1
    return left


def remove_entry(dirfd: int, name: str, *, deadline: float | None = None) -> None:
    """rm -rf of ``name`` in ``dirfd``: a link or file is unlinked, a directory emptied (iteratively)
    and removed. Raises OSError when something is left (another filesystem mounted inside, EPERM)."""
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(name, dir_fd=dirfd)
        except FileNotFoundError:
            pass
        return
    child = _open_child(dirfd, name, st)
    if child is None:  # swapped since the stat: whatever is there now is removed as a name
        try:
            os.unlink(name, dir_fd=dirfd)
        except IsADirectoryError:
            raise Raced(errno.ESTALE, "a directory was swapped while the runtime removed it", name) from None
        except FileNotFoundError:
            pass
        return
    try:
        left = remove_children(child, deadline=deadline)
    finally:
        os.close(child)
    try:
        os.rmdir(name, dir_fd=dirfd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror} ({left} entries could not be removed)", name) from None
