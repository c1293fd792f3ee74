"""A long step shows its elapsed time (mur.cli.progress.StepClock, used by every StepReporter.step): a
live spinner line on a terminal, heartbeat lines where stderr is a pipe or a file, nothing with
MUR_NO_PROGRESS=1 and nothing for a step shorter than the thresholds."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console

from mur.cli import progress
from mur.cli.progress import StepClock, elapsed_text


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(progress, "SHOW_AFTER", 0.05)
    monkeypatch.setattr(progress, "HEARTBEAT_FIRST", 0.05)
    monkeypatch.setattr(progress, "HEARTBEAT_EVERY", 0.3)


def test_heartbeat_lines_where_stderr_is_not_a_terminal(quick, monkeypatch):
    monkeypatch.delenv("MUR_NO_PROGRESS", raising=False)
    lines: list[str] = []
    clock = StepClock(Console(file=io.StringIO()), lines.append)
    assert clock.mode == "beat"  # pytest's stderr is not a terminal
    with clock.running("upload release 2"):
        with clock.running("inner"):
            time.sleep(0.5)
    assert lines and all(line.startswith("  … inner: ") and line.endswith("s") for line in lines), lines
    assert clock.thread is None  # nothing keeps running after the step


def test_a_live_line_on_a_terminal_gone_when_the_step_ends(quick):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80)
    clock = StepClock(console, lambda _t: None)
    clock.mode = "live"
    with clock.running("push registry/cap:1"):
        time.sleep(0.7)
    assert "push registry/cap:1  0s" in out.getvalue()
    assert clock.live is None and clock.thread is None


def test_nothing_with_mur_no_progress(quick, monkeypatch):
    monkeypatch.setenv("MUR_NO_PROGRESS", "1")
    lines: list[str] = []
    clock = StepClock(Console(file=io.StringIO()), lines.append)
    with clock.running("wait"):
        time.sleep(0.2)
    assert clock.mode is None and lines == []


def test_elapsed_text():
    assert [elapsed_text(s) for s in (0.4, 12.9, 65, 3600)] == ["0s", "12s", "1m05s", "60m00s"]
