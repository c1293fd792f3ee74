"""Helpers for the manifest tests: fake host probes and a subprocess `mur` runner.

The fake probe stands in for mur.sandbox.probe in-process (pure functions, no kernel needed); the
subprocess runner uses the real probe, and the tests that depend on what this host achieves are
marked `requires_landlock` (the repository conftest skips them on a host without Landlock).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Variables that would change what a manifest resolves to; never inherited from the machine.
SCRUB = ("ANTHROPIC_API_KEY", "MUR_DEBUG", "MURMUR_A2A_TIMEOUT_SECS")


@dataclass(frozen=True)
class FakeProbe:
    achieved: str
    mechanism: str
    tier: str
    os: str = "linux"
    landlock_abi: int = 7
    root: bool = True
    netns: bool = True
    userns: bool = False
    sealed: bool = False
    sealed_reason: str | None = "no mount namespace for the session on this (pretend) host"
    disk_loop: bool = False
    disk_tmpfs: bool = False
    disk_reason: str | None = None


# A Landlock-capable Linux host where the tools' composed root cannot be built (the goldens' host:
# they do not change with whether this machine can build one).
SCOPED_HOST = FakeProbe("scoped", "landlock+seccomp", "full")
# ... and one where it can (as root, with loop devices: this machine and CI).
SEALED_HOST = FakeProbe("sealed", "mountns+pivot_root+landlock+seccomp", "full", sealed=True, sealed_reason=None,
                        disk_loop=True, disk_tmpfs=True)
ADVISORY_LINUX = FakeProbe("advisory", "seccomp-only", "seccomp-only", landlock_abi=0)
ADVISORY_MACOS = FakeProbe("advisory", "none", "environment-only", os="darwin", landlock_abi=0, netns=False)
# A Landlock host where no network namespace can be made (non-root, user namespaces disabled).
NO_NETNS_HOST = FakeProbe("scoped", "landlock+seccomp", "full", root=False, netns=False)


@dataclass
class Run:
    code: int
    out: str
    err: str


def mur_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for a subprocess `mur`: PATH, HOME, LANG and what the case adds."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


def run_mur(*args: str, cwd: Path, home: Path, env: dict[str, str] | None = None, timeout: int = 60) -> Run:
    """Run the real CLI (`python -m mur`) in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "mur", *args],
        cwd=cwd,
        env=mur_env(home, env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)
