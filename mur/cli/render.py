"""Output helpers shared by commands: stdout for results, stderr for progress and notes."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable


class Reported(Exception):
    """A command already told the user how it ended: exit with `code`, print nothing more."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def emit_json(obj: Any) -> None:
    """Print exactly one compact JSON line on stdout.

    Non-ASCII text is written as UTF-8, as upstream's serde_json does; only when stdout cannot
    encode it (an ASCII locale, or undecodable file names kept as surrogates) is it escaped.
    """
    text = json.dumps(obj, separators=(",", ":"), sort_keys=False, ensure_ascii=False)
    try:
        text.encode(sys.stdout.encoding or "utf-8")
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(obj, separators=(",", ":"), sort_keys=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def emit(obj: Any, json_out: bool, human: Callable[[Any], str]) -> None:
    """A command's result: one JSON line with --json, else `human(obj)` (rendered only then)."""
    if json_out:
        emit_json(obj)
    else:
        sys.stdout.write(human(obj))
        sys.stdout.flush()


def note(text: str) -> None:
    """A human line on stderr (progress, notes)."""
    print(text, file=sys.stderr, flush=True)


def stderr_console():
    """A rich Console on stderr (imported lazily)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)
