"""What `mur run` reports while a session runs, for the CLI to render (the library never prints).

A leaf module: the runner calls a :class:`SessionReporter` it is handed; mur/cli/run.py renders
it (human text on stderr and the answer on stdout, or a JSON line at the start and one at the end
with --json).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Iterator, Protocol


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


@dataclass(frozen=True)
class Ending:
    """How the session ended: what the final status line (or the last JSON line) shows."""

    status: str  # ok | failed | trapped | max_turns_reached | interrupted
    session_id: str
    result: str | None = None  # the answer of the last task, when it completed
    result_path: Path | None = None  # out/result.txt in the session directory, once a task wrote it
    error: Any = None  # the MurError behind a status other than ok (None for interrupted)


class SessionReporter(Protocol):
    def started(self, startup: Startup) -> None:
        """Staged and serving; called once, before the first task runs."""
        ...

    def waiting(self, url: str, timeout: float | None) -> None:
        """Nothing to run: the session waits up to `timeout` seconds (None: forever) for an A2A task."""
        ...

    def activity(self, text: str) -> ContextManager[None]:
        """Long work under way for the block: compiling a component, a provider retry's backoff."""
        ...

    def ended(self, ending: Ending) -> None:
        """The session is over and torn down; called once, before any error is raised."""
        ...


class SilentReporter:
    """Reports nothing (library callers that only want the outcome)."""

    def started(self, startup: Startup) -> None:
        pass

    def waiting(self, url: str, timeout: float | None) -> None:
        pass

    @contextlib.contextmanager
    def activity(self, text: str) -> Iterator[None]:
        yield

    def ended(self, ending: Ending) -> None:
        pass
