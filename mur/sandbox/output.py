"""Tool output: the first 16 KiB of each stream inline, the rest spooled for the full log."""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

OUTPUT_LIMIT = 16 * 1024  # bytes of stdout / stderr returned inline (upstream: 16 KB)


def cut(data: bytes, limit: int = OUTPUT_LIMIT) -> str:
    if len(data) > limit:
        cut = limit
        while cut > 0 and (data[cut] & 0xC0) == 0x80:  # do not split a UTF-8 sequence
            cut -= 1
        data = data[:cut]
    return data.decode("utf-8", errors="replace")


class Capture:
    """One output stream: the first bytes in memory, everything (up to a cap) in an unnamed spool file."""

    def __init__(self, spool_dir: str, cap: int) -> None:
        self.head = bytearray()
        self.total = 0
        self.cap = cap
        self.spool_dir = spool_dir
        self.spool: IO[bytes] | None = None

    def feed(self, chunk: bytes) -> None:
        if self.total < self.cap:
            keep = chunk[: self.cap - self.total]
            if self.spool is None and len(self.head) + len(keep) > OUTPUT_LIMIT + 4:
                self.spool = tempfile.TemporaryFile(dir=self.spool_dir)
                self.spool.write(self.head)
            if self.spool is not None:
                self.spool.write(keep)
            if len(self.head) < OUTPUT_LIMIT + 4:
                self.head += keep[: OUTPUT_LIMIT + 4 - len(self.head)]
        self.total += len(chunk)

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


def write_log(logs: Path, text: str, out: Capture, err: Capture) -> str:
    """Write ``logs/shell-<UTC timestamp>.log`` with the full stdout and stderr; returns its path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    path = logs / f"shell-{stamp}.log"
    n = 1
    while path.exists():
        path = logs / f"shell-{stamp}-{n}.log"
        n += 1
    with open(path, "wb") as fh:
        fh.write(f"$ {text}\n--- stdout ({out.total} bytes) ---\n".encode())
        out.copy_to(fh)
        fh.write(f"\n--- stderr ({err.total} bytes) ---\n".encode())
        err.copy_to(fh)
    return str(path)
