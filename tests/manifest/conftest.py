"""Fixtures for the manifest tests: an isolated HOME and project directory."""

from __future__ import annotations

import pytest

from manifest_support import SCRUB


@pytest.fixture
def project(tmp_path, home, monkeypatch):
    """(home, project dir): HOME and cwd inside tmp_path, no inherited credentials."""
    proj = tmp_path / "proj"
    proj.mkdir()
    for var in SCRUB:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(proj)
    return home, proj
