"""Output helpers shared by commands: stdout for results, stderr for progress and notes."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from typing import IO, Any, Callable, Iterator

# C0 controls but newline and tab, DEL, and C1: ESC starts the sequences that retitle a terminal,
# rewrite what is on screen, or (OSC 52) write its clipboard; CR overwrites a line in place.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")


def terminal_safe(text: str, stream: IO[str] | None = None) -> str:
    """``text`` made inert for a terminal: what a model or a tool wrote (an answer, a command in a
    trace, a log) has its control characters shown as ``\\xNN``. Only for a terminal: a pipe or a
    file gets the text as it is."""
    stream = stream or sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if tty else text


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
        sys.stdout.write(terminal_safe(human(obj)))
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
        from mur.cli.progress import StepClock

        self.console = stderr_console()
        self.clock = StepClock(self.console, lambda text: self.line(text, "dim"))

    def line(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style, markup=False)

    def note(self, text: str) -> None:
        self.line(f"  {text}", "dim")

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        """`· text`, the elapsed time while it runs past 2 s (mur.cli.progress.StepClock), then `✓ text (Ns)`."""
        start = time.monotonic()
        self.line(f"· {text}")
        try:
            with self.clock.running(text):
                yield
        except BaseException:
            self.line(f"✗ {text}", "red")
            raise
        self.line(f"✓ {text} ({time.monotonic() - start:.1f}s)", "green")
