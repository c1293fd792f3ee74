"""Progress lines on stderr while deploy works (stdout stays for the result / --json line)."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator


class Progress:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._console = None
        if enabled:
            try:
                from rich.console import Console

                self._console = Console(stderr=True, highlight=False)
            except ImportError:  # pragma: no cover - rich is a dependency
                self._console = None

    def _print(self, text: str, style: str | None = None) -> None:
        if not self.enabled:
            return
        if self._console is not None:
            self._console.print(text, style=style, markup=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        self._print(f"  {text}", "dim")

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        start = time.monotonic()
        self._print(f"· {text}")
        try:
            yield
        except BaseException:
            self._print(f"✗ {text}", "red")
            raise
        self._print(f"✓ {text} ({time.monotonic() - start:.1f}s)", "green")


QUIET = Progress(enabled=False)
