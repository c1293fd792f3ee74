"""Small filesystem helpers: atomic writes (temp file in the same directory, fsync, rename)."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterator


def atomic_write_bytes(path: Path | str, data: bytes, mode: int = 0o644) -> Path:
    """Write `data` to `path` so a reader sees the old file or the whole new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)
    return path


def file_sha256(path: Path | str) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (never the whole file in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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


def write_file(path: Path | str, data: bytes, mode: int = 0o644) -> Path:
    """atomic_write_bytes with its OSError as E-IO-003 (private from the first byte: mkstemp is 0600)."""
    from mur.errors import MurError

    try:
        return atomic_write_bytes(path, data, mode)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot write {path}: {exc.strerror or exc}") from exc
