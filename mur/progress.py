"""How library code reports progress on long work: an injected Reporter (library code never prints).

Deploy, image builds and transfers, and provisioning take one; mur/cli renders it
(mur.cli.render.StepReporter: lines on stderr); tests and library callers pass `QUIET` or their own.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager, Iterator, Protocol


class Reporter(Protocol):
    def note(self, text: str) -> None:
        """A detail line under the current step."""

    def step(self, text: str) -> ContextManager[None]:
        """A named phase; the context manager marks it done, or failed when it raises."""


class Quiet:
    """Reports nothing (also a base for reporters that add methods, e.g. provisioning's plan)."""

    def note(self, text: str) -> None:
        pass

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        yield


QUIET: Reporter = Quiet()
