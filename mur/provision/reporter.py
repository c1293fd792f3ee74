"""How provisioning reports progress: an injected reporter (only mur/cli prints).

The same shape as mur.deploy.progress.Progress (`step` context manager, `note`), which the
deploy preflight calls too, plus `plan` for the list of changes before they are made.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Protocol


class Reporter(Protocol):
    def step(self, text: str) -> contextlib.AbstractContextManager[None]: ...

    def note(self, text: str) -> None: ...

    def plan(self, plan: Any) -> None: ...


class _Quiet:
    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        yield

    def note(self, text: str) -> None:
        pass

    def plan(self, plan: Any) -> None:
        pass


QUIET: Reporter = _Quiet()
