"""A private cache directory under `<cache root>`: files only this uid could have written.

The runtime may be root, so a cache file is trusted only when nobody else could have written it:
the directory and the file are opened with O_NOFOLLOW, and both must be owned by the effective uid
with no group or other write bit (else the file is ignored and not rewritten). Writes are atomic (a
fresh file renamed over the old one) into a 0700 directory. The kernel probe's answer
(mur.sandbox.probecache) lives in one.

Everything here is best effort: a cache that cannot be read or written is a miss, never an error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

READ_LIMIT = 256 * 1024


def directory(name: str) -> Path | None:
    """`<cache root>/<name>`, or None when no home is known."""
    from mur.errors import MurError
    from mur.paths import cache_root

    try:
        return cache_root() / name
    except MurError:
        return None


def trusted(st: os.stat_result) -> bool:
    """Owned by us, and nobody else can write it."""
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def open_dir(path: Path) -> int | None:
    """A descriptor of `path` when it is a directory we own and only we can write, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not trusted(os.fstat(fd)):
        os.close(fd)
        return None
    return fd


def open_file(name: str, file: str) -> tuple[int, os.stat_result] | None:
    """`<cache root>/<name>/<file>` opened read-only, with its stat, when it is a regular file we own
    that only we can write, in such a directory (else None); the caller closes the fd."""
    path = directory(name)
    if path is None:
        return None
    dirfd = open_dir(path)
    if dirfd is None:
        return None
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd)
    except OSError:
        return None
    finally:
        os.close(dirfd)
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode) or not trusted(st):
        os.close(fd)
        return None
    return fd, st


def read(name: str, file: str, limit: int = READ_LIMIT) -> bytes | None:
    """The bytes of `<cache root>/<name>/<file>`, or None (absent, a link, not ours, too big)."""
    opened = open_file(name, file)
    if opened is None:
        return None
    fd, st = opened
    try:
        if st.st_size > limit:
            return None
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def writable_dir(name: str) -> int | None:
    """A descriptor of `<cache root>/<name>`, created 0700 if missing, when it is ours and only we
    can write it (else None); the caller closes it."""
    path = directory(name)
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return open_dir(path)


def write(name: str, file: str, data: bytes, keep: int | None = None) -> bool:
    """Write `<cache root>/<name>/<file>` atomically (0600, in a 0700 directory); False (and nothing
    written) where the directory is not ours. `keep`: then remove the oldest files beyond that many,
    so a cache keyed by something unbounded stays small."""
    dirfd = writable_dir(name)
    if dirfd is None:
        return False
    from mur.fsafe import write_atomic_at

    try:
        write_atomic_at(dirfd, file, data, mode=0o600, durable=False)
        if keep is not None:
            prune(dirfd, keep)
        return True
    except OSError:
        return False
    finally:
        os.close(dirfd)


def prune(dirfd: int, keep: int) -> None:
    """Remove the oldest files in `dirfd` beyond `keep` (dot-names, other writers' temp files, stay)."""
    entries = []
    for entry in os.scandir(dirfd):
        if entry.name.startswith("."):  # another writer's temp file
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        entries.append((st.st_mtime_ns, entry.name))
    entries.sort(reverse=True)
    for _, old in entries[keep:]:
        try:
            os.unlink(old, dir_fd=dirfd)
        except OSError:
            pass
