"""Fixtures shared by the fast tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: cli(*args) -> (exit code, stdout, stderr)."""
    from mur.cli.main import main

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out, err = capsys.readouterr()
        return exc.value.code, out, err

    return run
