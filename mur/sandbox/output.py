"""Tool output: the first 16 KiB of each stream inline, the rest spooled for the full log.

Spools and logs are created in a directory held open (a ``mur.fsafe.Tree``), ``O_TMPFILE`` and
``O_EXCL``: nothing is ever written through a name a tool could have prepared.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from mur import fsafe
from mur.fsafe import Tree

OUTPUT_LIMIT = 16 * 1024  # bytes of stdout / stderr returned inline (upstream: 16 KB)


def open_trees(workdir: Path, logs_dir: Path | None) -> tuple[Tree, Tree]:
    """(the workdir, the logs directory) held open; the logs are ``<workdir>/logs`` without
    ``logs_dir``. Raises OSError."""
    work = Tree(workdir)
    try:
        if logs_dir is None or fsafe.inside(logs_dir, workdir):
            return work, work.subtree(os.path.relpath(logs_dir or workdir / "logs", workdir), create=True)
        return work, Tree(logs_dir, create=True)
    except BaseException:
        work.close()
        raise


def readonly_dirs(workdir: Path, logs_dir: Path | None) -> tuple[str, ...]:
    """The logs directory, when it is outside the workdir: tools may read it, never write it."""
    logs = str(logs_dir)
    return () if logs_dir is None or fsafe.inside(logs, workdir) else (logs,)


def cut(data: bytes, limit: int = OUTPUT_LIMIT) -> str:
    if len(data) > limit:
        cut = limit
        while cut > 0 and (data[cut] & 0xC0) == 0x80:  # do not split a UTF-8 sequence
            cut -= 1
        data = data[:cut]
    return data.decode("utf-8", errors="replace")


class Capture:
    """One output stream: the first bytes in memory, everything (up to a cap) in an unnamed spool file."""

    def __init__(self, spool_dir: str | Tree, cap: int) -> None:
        self.head = bytearray()
        self.total = 0
        self.cap = cap
        self.spool_dir = spool_dir
        self.spool: IO[bytes] | None = None

    def feed(self, chunk: bytes) -> None:
        if self.total < self.cap:
            keep = chunk[: self.cap - self.total]
            if self.spool is None and len(self.head) + len(keep) > OUTPUT_LIMIT + 4:
                self.spool = _spool(self.spool_dir)
                self.spool.write(self.head)
            if self.spool is not None:
                self.spool.write(keep)
            if len(self.head) < OUTPUT_LIMIT + 4:
                self.head += keep[: OUTPUT_LIMIT + 4 - len(self.head)]
        self.total += len(chunk)

    @property
    def spooled(self) -> int:
        """Bytes held in the unnamed spool file (the disk this stream takes before its log exists)."""
        return min(self.total, self.cap) if self.spool is not None else 0

    def copy_to(self, out: IO[bytes]) -> None:
        if self.spool is None:
            out.write(bytes(self.head))
        else:
            self.spool.seek(0)
            shutil.copyfileobj(self.spool, out)
        if self.total > self.cap:
            out.write(f"\n[mur: {self.total - self.cap} further bytes discarded]\n".encode())

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()


def _spool(where: str | Tree) -> IO[bytes]:
    """An unnamed temporary file in ``where`` (gone when closed)."""
    if isinstance(where, str):
        return tempfile.TemporaryFile(dir=where)
    return os.fdopen(where.open(".", os.O_TMPFILE | os.O_RDWR, 0o600), "w+b")


def write_log(logs: Tree, text: str, out: Capture, err: Capture) -> str:
    """Write ``logs/shell-<UTC timestamp>.log`` with the full stdout and stderr; returns its path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    name, n = f"shell-{stamp}.log", 1
    while True:
        try:
            fd = logs.create(name)
            break
        except FileExistsError:
            name, n = f"shell-{stamp}-{n}.log", n + 1
        except OSError as exc:  # an existing symlink under that name answers ELOOP, not EEXIST
            if exc.errno != errno.ELOOP:
                raise
            name, n = f"shell-{stamp}-{n}.log", n + 1
    path = str(logs.path / name)
    with os.fdopen(fd, "wb") as fh:
        fh.write(f"$ {text}\n--- stdout ({out.total} bytes) ---\n".encode())
        out.copy_to(fh)
        fh.write(f"\n--- stderr ({err.total} bytes) ---\n".encode())
        err.copy_to(fh)
    return str(path)
