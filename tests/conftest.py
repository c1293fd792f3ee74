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
