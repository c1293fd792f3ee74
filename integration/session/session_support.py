"""Helpers for `mur run` end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mur.trace.reader import load_events as read_trace  # noqa: F401 - the product's one reader


def run_mur(*args: str, cwd: Path, home: Path | None = None, env: dict | None = None, timeout: float = 120):
    """Run the real CLI in a subprocess; returns CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.setdefault("MURMUR_A2A_TIMEOUT_SECS", "5")
    # Keep wasmtime's compile cache shared across tests even when HOME is a fresh temp dir.
    full_env.setdefault("MUR_CACHE_DIR", str(Path.home() / ".murmur" / "cache"))
    if home is not None:
        full_env["HOME"] = str(home)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "mur", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def session_dirs(capsule_dir: Path) -> list[Path]:
    root = capsule_dir / "workdir"
    return sorted(root.iterdir()) if root.is_dir() else []

