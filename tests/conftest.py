"""Fixtures shared by every folder of tests/ (each defined once, here)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A clean HOME (tmp_path/home) so the machine's stores and config files never leak into a test."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def cli():
    """Run the CLI in-process: cli(*args) -> (exit code, stdout, stderr) (tests/support/mur_cli.py)."""
    from mur_cli import run_mur

    def run(*args: str) -> tuple[int, str, str]:
        result = run_mur(*args)
        return result.code, result.out, result.err

    return run
