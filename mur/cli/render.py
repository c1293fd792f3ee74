"""Output helpers shared by commands: stdout for results, stderr for progress and notes."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Any, Callable, Iterator


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


class StepReporter:
    """The CLI's rendering of a library Reporter (deploy, image, host, vm): `step` and `note` lines
    on stderr, so stdout stays for the result or the --json line."""

    def __init__(self) -> None:
        self.console = stderr_console()

    def line(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style, markup=False)

    def note(self, text: str) -> None:
        self.line(f"  {text}", "dim")

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        start = time.monotonic()
        self.line(f"· {text}")
        try:
            yield
        except BaseException:
            self.line(f"✗ {text}", "red")
            raise
        self.line(f"✓ {text} ({time.monotonic() - start:.1f}s)", "green")
