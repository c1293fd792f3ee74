"""Transfer progress, reported through an injected callable: the library never draws.

A :class:`Transfer` wraps one upload or download: ``with transfer(description, total) as advance:``
then ``advance(nbytes)`` per chunk. RemoteRegistry takes one (default :func:`silent`); the CLI
passes mur.cli.progress.transfer_bar, a rich bar on stderr when stderr is a terminal.
"""

from __future__ import annotations

import contextlib
from typing import Callable, ContextManager, Iterator, Protocol

Advance = Callable[[int], None]


class Transfer(Protocol):
    def __call__(self, description: str, total: int | None) -> ContextManager[Advance]:
        """Enter for one transfer of `total` bytes (None: unknown); yields `advance(nbytes)`."""
        ...


@contextlib.contextmanager
def silent(description: str, total: int | None) -> Iterator[Advance]:
    """Reports nothing."""
    yield lambda n: None
