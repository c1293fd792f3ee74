"""Fixtures for the artifact tests: an isolated HOME/cwd and an in-process `mur` runner."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """HOME and cwd inside tmp_path; no progress bars; no NEXUS_* leaking in from the host."""
    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MUR_NO_PROGRESS", "1")
    for var in ("NEXUS_API_KEY", "NEXUS_BIND", "NEXUS_DATA", "MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(work)
    return tmp_path


@pytest.fixture
def mur(capsys):
    """Run the CLI in-process: mur(*args, cwd=None) -> Result(code, stdout, stderr)."""
    from mur.cli.main import main

    def run(*args: str, cwd: Path | None = None) -> Result:
        capsys.readouterr()
        old = Path.cwd()
        if cwd is not None:
            os.chdir(cwd)
        try:
            try:
                main(list(args))
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.chdir(old)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
