"""Fixtures for the artifact tests: an isolated HOME/cwd and an in-process `mur` runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from mur_cli import Result, run_mur


@pytest.fixture
def isolated(tmp_path, home, monkeypatch):
    """HOME and cwd inside tmp_path; no progress bars; no NEXUS_* leaking in from the host."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("MUR_NO_PROGRESS", "1")
    for var in ("NEXUS_API_KEY", "NEXUS_BIND", "NEXUS_DATA", "MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(work)
    return tmp_path


@pytest.fixture
def mur():
    """Run the CLI in-process: mur(*args, cwd=None) -> Result(code, stdout, stderr)."""

    def run(*args: str, cwd: Path | None = None) -> Result:
        return run_mur(*args, cwd=cwd)

    return run
