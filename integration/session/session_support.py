"""Helpers for `mur run` end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mur.trace.reader import load_events as read_trace  # noqa: F401 - the product's one reader


def run_mur(*args: str, cwd: Path, home: Path | None = None, env: dict | None = None, timeout: float = 120):
    """Run the real CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = mur_env(home, **(env or {}))
    full_env.setdefault("MURMUR_A2A_TIMEOUT_SECS", "5")
    return subprocess.run(
        [sys.executable, "-m", "mur", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def session_dirs(capsule_dir: Path) -> list[Path]:
    root = capsule_dir / "workdir"
    return sorted(root.iterdir()) if root.is_dir() else []


def mur_env(home: Path | None, **extra: str) -> dict[str, str]:
    """A subprocess's environment: this one, wasmtime's compile cache shared across tests even when
    HOME is a fresh temp dir, HOME, then `extra`."""
    env = dict(os.environ)
    env.setdefault("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))
    if home is not None:
        env["HOME"] = str(home)
    env.update(extra)
    return env
