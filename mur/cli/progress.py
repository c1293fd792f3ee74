"""Progress on stderr (rich): transfer bars, activity spinners and the elapsed time of long steps.

Bars and spinners are drawn only when stderr is a terminal; a step's elapsed time (StepClock) is a
live line there and, where stderr is a pipe or a file, a heartbeat line once a step passed 5 s.
`MUR_NO_PROGRESS=1` turns all of them off, so stdout and stderr stay byte-stable for golden
comparisons. The library reports through
mur.artifacts.progress.Transfer and mur.session.reporter.SessionReporter.activity; this is the
CLI's drawing of them.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
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
    global _others
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
    _others += 1
    try:
        with progress:
            task = progress.add_task(description, total=total)
            yield lambda n: progress.advance(task, n)
    finally:
        _others -= 1


@contextlib.contextmanager
def activity(description: str) -> Iterator[None]:
    """A spinner with `description` and the elapsed time while the block runs, then one `✓` line
    saying how long it took; nothing at all when disabled."""
    global _others
    if not enabled():
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, highlight=False)
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console, transient=True)
    started = time.monotonic()
    _others += 1
    try:
        with progress:
            progress.add_task(description, total=None)
            yield
    finally:
        _others -= 1
    console.print(f"✓ {description} ({time.monotonic() - started:.1f}s)", style="dim", markup=False)


# --- the elapsed time of long steps ------------------------------------------------------------------

SHOW_AFTER = 2.0  # a step shorter than this draws nothing: its `✓ ... (Ns)` line says enough
HEARTBEAT_FIRST, HEARTBEAT_EVERY = 5.0, 15.0  # where stderr is not a terminal: lines at 5 s, 20 s, 35 s...
_others = 0  # transfer bars and activity spinners drawing now (one live display at a time on a terminal)


def heartbeats() -> bool:
    """A step's elapsed time as plain lines: stderr is a pipe or a file (a CI log, `2> deploy.log`)."""
    return os.environ.get("MUR_NO_PROGRESS") != "1" and not enabled()


def elapsed_text(seconds: float) -> str:
    """12s, 1m05s."""
    whole = int(seconds)
    return f"{whole}s" if whole < 60 else f"{whole // 60}m{whole % 60:02d}s"


class StepClock:
    """The elapsed time of the steps under way (mur.cli.render.StepReporter.step): after SHOW_AFTER
    seconds a live `⠋ <step>  12s` line on a terminal (the innermost step, redrawn four times a
    second, gone when the step ends), or `  … <step>: 20s` heartbeat lines where stderr is not a
    terminal. Every long wait of deploy, rollback, start, uploads, image push and provisioning runs
    inside a step, so each gets it without asking; MUR_NO_PROGRESS=1 turns it off."""

    def __init__(self, console, line: Callable[[str], None]):  # noqa: ANN001 - rich Console
        self.console, self.line = console, line
        self.mode = "live" if enabled() else "beat" if heartbeats() else None
        self.steps: list[list] = []  # [text, started, next heartbeat]
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None
        self.live = None
        self.spinner = None

    @contextlib.contextmanager
    def running(self, text: str) -> Iterator[None]:
        if self.mode is None:
            yield
            return
        now = time.monotonic()
        entry = [text, now, now + HEARTBEAT_FIRST]
        with self.lock:
            self.steps.append(entry)
            if self.thread is None:
                self.wake.clear()
                self.thread = threading.Thread(target=self._tick, name="mur-step-clock", daemon=True)
                self.thread.start()
        try:
            yield
        finally:
            with self.lock:
                self.steps.remove(entry)
                last, thread = not self.steps, self.thread
                if last:
                    self.thread = None
                    self.wake.set()
                elif self.live is not None:  # the enclosing step again, not the one that just ended
                    outer, started, _beat = self.steps[-1]
                    self.spinner.update(text=f"{outer}  {elapsed_text(time.monotonic() - started)}")  # type: ignore[union-attr]
            if last and thread is not None:
                thread.join()
                self._stop_live()

    def _tick(self) -> None:
        while not self.wake.wait(0.25):
            with self.lock:
                if not self.steps:
                    return
                text, started, beat = self.steps[-1]
                elapsed = time.monotonic() - started
                if self.mode == "beat" and time.monotonic() >= beat:
                    self.steps[-1][2] = beat + HEARTBEAT_EVERY
                    self.line(f"  … {text}: {elapsed_text(elapsed)}")
            if self.mode == "live":
                self._draw(text, elapsed)

    def _draw(self, text: str, elapsed: float) -> None:
        if _others or elapsed < SHOW_AFTER:
            self._stop_live()
            return
        from rich.live import Live
        from rich.spinner import Spinner

        label = f"{text}  {elapsed_text(elapsed)}"
        if self.live is None:
            self.spinner = Spinner("dots", text=label, style="cyan")
            self.live = Live(self.spinner, console=self.console, transient=True, refresh_per_second=4,
                             redirect_stdout=False, redirect_stderr=True)
            self.live.start()
        else:
            self.spinner.update(text=label)  # type: ignore[union-attr]

    def _stop_live(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            live.stop()
