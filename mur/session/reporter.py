"""What `mur run` reports while a session runs, for the CLI to render (the library never prints).

A leaf module: the runner calls a :class:`SessionReporter` it is handed; mur/cli/run.py renders
the startup line and the final status (human text, or one JSON line with --json).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Startup:
    """The session is serving: everything the startup line shows (deploy reads its JSON form)."""

    url: str
    pid: int
    session_id: str
    name: str
    version: str
    workdir: Path  # the session directory (the runtime's record)
    tools_workdir: Path  # the tree shell tools and guests may write
    driver: str | None  # the driver artifact (transport http) or the process command
    skills: int  # installed skills


class SessionReporter(Protocol):
    def started(self, startup: Startup) -> None:
        """Staged and serving; called once, before the first task runs."""
        ...

    def ended(self, status: str) -> None:
        """The session's final status (ok, failed, trapped, max_turns_reached), before any error is raised."""
        ...


class SilentReporter:
    """Reports nothing (library callers that only want the outcome)."""

    def started(self, startup: Startup) -> None:
        pass

    def ended(self, status: str) -> None:
        pass
