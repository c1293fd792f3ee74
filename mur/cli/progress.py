"""Progress on stderr (rich): transfer bars and activity spinners, shown only when stderr is a terminal.

`MUR_NO_PROGRESS=1` turns them off everywhere; tests and pipes never see them, so stdout and
stderr stay byte-stable for golden comparisons. The library reports through
mur.artifacts.progress.Transfer and mur.session.reporter.SessionReporter.activity; this is the
CLI's drawing of them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Callable, Iterator


def enabled() -> bool:
    if os.environ.get("MUR_NO_PROGRESS") == "1":
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def transfer_bar(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """Yield `advance(nbytes)`; draws a byte progress bar when enabled, else does nothing."""
    if not enabled():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    progress = Progress(
        TextColumn("  {task.description}"),
        BarColumn(bar_width=24),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


@contextlib.contextmanager
def activity(description: str) -> Iterator[None]:
    """A spinner with `description` and the elapsed time while the block runs, then one `✓` line
    saying how long it took; nothing at all when disabled."""
    if not enabled():
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, highlight=False)
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console, transient=True)
    started = time.monotonic()
    with progress:
        progress.add_task(description, total=None)
        yield
    console.print(f"✓ {description} ({time.monotonic() - started:.1f}s)", style="dim", markup=False)
