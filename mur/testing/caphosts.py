"""The capsule hosts a test or a benchmark started under a HOME of its own (with XDG_RUNTIME_DIR
unset, a host's socket and its `.lock` live in `<HOME>/.murmur/run/`; the lock names the host's
pid: mur.cli.capsulehost). Signals go only to pids read from those lock files."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from mur.fsutil import lock_held


def host_pids(home: Path | str, serving: bool = False) -> list[int]:
    """The pids of the hosts under `home` that are alive now (`serving`: only those whose socket has
    its name, which a host gives it once its imports are done)."""
    pids = []
    for lock in Path(home, ".murmur", "run").glob("caphost-*.sock.lock"):
        if serving and not lock.with_suffix("").exists():
            continue
        try:
            if not lock_held(lock):  # a host that died unannounced left its pid: maybe someone else's now
                continue
            pid = int(lock.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            continue
        pids.append(pid)
    return pids


def wait_for_host(home: Path | str, timeout: float = 60) -> list[int]:
    """The hosts under `home` once one serves (an empty list after `timeout`)."""
    deadline = time.monotonic() + timeout
    while not (pids := host_pids(home, serving=True)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pids


def stop_hosts(home: Path | str) -> None:
    """SIGTERM the hosts serving under `home` (each ends its capsules with it)."""
    for pid in host_pids(home):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
