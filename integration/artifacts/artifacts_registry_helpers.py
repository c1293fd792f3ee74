"""Helpers for the artifact integration tests: real `mur registry serve` processes on 127.0.0.1 and a
subprocess `mur` runner with its own HOME. (A uniquely named module, not conftest: `import conftest`
would be ambiguous with the repository-level conftest.py.)
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

KEY = "integration-secret-key"


@dataclass
class Registry:
    url: str
    key: str
    data: Path
    proc: subprocess.Popen


@dataclass
class Run:
    code: int
    out: str
    err: str


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "MURMUR_"))}
    env.update(HOME=str(home), MUR_NO_PROGRESS="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def mur(args: list[str], *, cwd: Path, home: Path, timeout: float = 60, **env: str) -> Run:
    """Run `python -m mur ARGS` as a separate process."""
    proc = subprocess.run(
        [sys.executable, "-m", "mur", *args],
        cwd=cwd,
        env=base_env(home, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


@contextlib.contextmanager
def registry_server(tmp: Path, key: str = KEY) -> Iterator[Registry]:
    """Start `mur registry serve --bind 127.0.0.1:0` and yield once it reports its URL."""
    data = tmp / "registry-data"
    home = tmp / "registry-home"
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mur", "registry", "serve", "--bind", "127.0.0.1:0", "--data", str(data)],
        env=base_env(home, NEXUS_API_KEY=key),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=30):
            raise RuntimeError("registry did not report its address within 30 s")
        line = proc.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if not match:
            raise RuntimeError(f"unexpected registry banner {line!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}")
        yield Registry(match.group(1), key, data, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def write_skill(directory: Path, name: str = "greet", version: str = "0.1.0", body: str = "# greet\n") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "murmur.yaml").write_text(f'name: {name}\nversion: "{version}"\nruntime: skill\n')
    (directory / "skill.md").write_text(body)
    return directory


def write_capsule(root: Path, artifacts: str, extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "murmur.yaml").write_text(f'name: cap\nversion: "0.1.0"\nartifacts:\n{artifacts}{extra}')
    return root
