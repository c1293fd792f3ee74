"""Value types of mur.image: the image reference a build or transfer returns, and the reporter seam."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Protocol


class Reporter(Protocol):
    """Progress for long work (mur.deploy.progress.Progress fits); library code never prints."""

    def step(self, text: str) -> contextlib.AbstractContextManager[None]: ...

    def note(self, text: str) -> None: ...


class _Quiet:
    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        yield

    def note(self, text: str) -> None:
        pass


QUIET: Reporter = _Quiet()


@dataclass(frozen=True)
class ImageRef:
    """An image in an engine: the tag it was given, its ID (the config digest), registry digests."""

    tag: str
    id: str
    digests: tuple[str, ...] = ()
