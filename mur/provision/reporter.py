"""How provisioning reports progress: mur.progress's Reporter (only mur/cli prints) plus `plan`,
the list of changes shown before they are made. The deploy preflight it runs takes the same object.
"""

from __future__ import annotations

from typing import Any, Protocol

from mur import progress


class Reporter(progress.Reporter, Protocol):
    def plan(self, plan: Any) -> None: ...


class _Quiet(progress.Quiet):
    def plan(self, plan: Any) -> None:
        pass


QUIET: Reporter = _Quiet()
