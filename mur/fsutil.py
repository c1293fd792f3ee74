"""Small filesystem helpers: atomic writes (temp file in the same directory, fsync, rename), digests,
locks, and the one translation of a full disk (ENOSPC, EDQUOT) into E-IO-003 naming the path."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
from pathlib import Path
from typing import Iterator

from mur.errors import MurError
from mur.fsafe import write_atomic_at

# errnos meaning "this filesystem has no room for you": the disk or the user's quota is full.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full_error(exc: OSError, path: Path | str | None) -> MurError:
    """E-IO-003 for a write that found no room, naming `path` (else the path the OSError names)."""
    where = path if path is not None else (exc.filename or "a file")
    what = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on device"
    return MurError(
        "E-IO-003",
        f"{what} writing {where}",
        "free space on that filesystem (df -h shows it; `mur gc` lists old sessions and compiled "
        "components to remove), then run the command again",
    )


@contextlib.contextmanager
def writing(path: Path | str) -> Iterator[None]:
    """Run a block that writes `path`; a full disk in it becomes E-IO-003 naming `path`."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise disk_full_error(exc, path) from exc
        raise


def atomic_write_bytes(path: Path | str, data: bytes, mode: int = 0o644) -> Path:
    """Write `data` to `path` so a reader sees the old file or the whole new one, never a part.

    For paths the runtime alone controls; inside a tool-writable tree use ``mur.fsafe.Tree``."""
    path = Path(path)
    with writing(path):
        _atomic_write(path, data, mode)
    fsync_dir(path.parent)
    return path


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic_at(fd, path.name, data, mode)
    finally:
        os.close(fd)


def file_sha256(path: Path | str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (never the whole file in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def mark_used(path: Path | str) -> None:
    """Set a cache entry's mtime to now (best effort): `mur gc` removes entries unused for a while."""
    try:
        os.utime(path)
    except OSError:
        pass


def fsync_dir(path: Path | str) -> None:
    """fsync a directory so a rename inside it survives a crash (best effort: some filesystems refuse)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: Path | str, text: str, mode: int = 0o644) -> Path:
    """atomic_write_bytes for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode)


@contextlib.contextmanager
def locked(lock_path: Path | str) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path` (created 0600) for the block: serialises mur processes."""
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def lock_held(lock_path: Path | str) -> bool:
    """Does a live process hold a flock on `lock_path` now? (No file: no.) The probe takes a shared
    lock for a moment, so two probes never see each other, and closing the fd lets go of it."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def write_file(path: Path | str, data: bytes, mode: int = 0o644) -> Path:
    """atomic_write_bytes with its OSError as E-IO-003 (private from the first byte: mkstemp is 0600)."""
    from mur.errors import MurError

    try:
        return atomic_write_bytes(path, data, mode)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot write {path}: {exc.strerror or exc}") from exc
