"""JSON-lines files read back: the one reader (trace.jsonl, eval.jsonl, eval datasets).

``read_records(path)`` -> ``[(line number, value), ...]`` for every non-blank line, or:

* ``BadLine`` (a ValueError with ``path``, ``number``, ``why``; ``str()`` is ``<path>:<line>: <why>``)
  for the first line that is not JSON -- callers turn it into their own code (E-TRC-001, E-EVAL-001);
* an OSError from opening or reading, including ``TooLarge`` past ``limit`` bytes, and
  ``mur.fsafe.LinkRefused`` when ``tool_writable`` and the file is a symlink or a hard link (a tool
  that can write the directory must not make mur read, say, /etc/shadow into an error message);
* UnicodeDecodeError when ``strict_utf8`` (otherwise bad bytes become U+FFFD).

Lines end at ``\\n`` only (a trailing ``\\r`` is dropped): JSON text may carry U+2028 and other
characters ``str.splitlines`` would split a record on.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

MAX_BYTES = 256 * 1024 * 1024  # a long session's trace stays well under this


class BadLine(ValueError):
    """A line that is not JSON."""

    def __init__(self, path: Path | str, number: int, why: str) -> None:
        super().__init__(f"{path}:{number}: {why}")
        self.path, self.number, self.why = path, number, why


class TooLarge(OSError):
    """The file is over the reader's byte limit."""


def read_records(path: Path | str, *, limit: int = MAX_BYTES, tool_writable: bool = False,
                 strict_utf8: bool = False) -> list[tuple[int, Any]]:
    """Every non-blank line of a JSON-lines file, parsed, with its 1-based line number."""
    return parse_records(_read(Path(path), limit, tool_writable), path, strict_utf8=strict_utf8)


def parse_records(data: bytes, path: Path | str, *, strict_utf8: bool = False) -> list[tuple[int, Any]]:
    """`read_records` for bytes read elsewhere (a deployment's trace, over SFTP); `path` names them."""
    text = data.decode("utf-8", errors="strict" if strict_utf8 else "replace")
    records = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line[:-1] if line.endswith("\r") else line
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise BadLine(path, number, f"not valid JSON: {exc.msg}") from exc
        except RecursionError as exc:  # nesting deeper than the parser goes
            raise BadLine(path, number, "not valid JSON: nested too deeply") from exc
    return records


def _read(path: Path, limit: int, tool_writable: bool) -> bytes:
    if tool_writable:
        from mur.fsafe import Tree

        with Tree(os.path.realpath(path.parent)) as tree:  # the file itself is never followed
            data = tree.read_bytes(path.name, limit + 1)
    else:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(errno.EFBIG, f"larger than {limit} bytes", os.fspath(path))
    return data
