"""The real CLI run in this process (`mur.cli.main.main`, what `python -m mur` calls), output captured.

In-process instead of a subprocess: the same code path and exit codes, without a Python start-up
per call. Tests that need a fresh process (signals, import-time behaviour) still spawn one.
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


@dataclass
class Result:
    code: int
    out: str
    err: str


@contextlib.contextmanager
def environment(changes: dict[str, str | None]) -> Iterator[None]:
    """Set (str) or unset (None) variables for the block, then restore them."""
    saved = {key: os.environ.get(key) for key in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_mur(*args: str, cwd: Path | str | None = None, env: dict[str, str | None] | None = None) -> Result:
    """`mur ARGS` in `cwd` with `env` changes; returns its exit code, stdout and stderr."""
    from mur.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    old = Path.cwd()
    code = 0
    with environment(env or {}):
        if cwd is not None:
            os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.chdir(old)
    return Result(code, out.getvalue(), err.getvalue())
