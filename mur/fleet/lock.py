"""One rollout of a fleet at a time.

Two operators must never roll the same fleet at once, from one machine or from two. The lock is taken
in two places, both released with the process that holds them (never by age):
  * here: an `flock` on ~/.murmur/fleets/<fleet>.lock, with the holder written beside it, so a second
    command on this machine fails (or waits) before it connects anywhere;
  * on every target of the fleet (mur.deploy.lock, the per-target lock of a deployment), under the
    name `fleet-<fleet>`, taken in a fixed order (sorted by target label) so two operators on two
    machines cannot each hold half of the fleet.
A second rollout waits up to `--lock-wait` seconds and then fails with E-FLEET-004 naming the holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

from mur.errors import MurError
from mur.paths import murmur_home
from mur.progress import QUIET, Reporter

POLL = 0.2


def lock_path(fleet_key: str) -> Path:
    return murmur_home() / "fleets" / f"{fleet_key}.lock"


def _holder(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.with_suffix(".holder").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def describe(holder: dict[str, Any]) -> str:
    if not holder:
        return "another command"
    return (f"`{holder.get('command', '?')}` (pid {holder.get('pid', '?')} on {holder.get('host', '?')}, "
            f"user {holder.get('user', '?')}, started {holder.get('started', '?')})")


def busy(fleet_key: str, where: str, holder_text: str, waited: float) -> MurError:
    return MurError("E-FLEET-004", f"fleet {fleet_key} is being rolled {where} by {holder_text}"
                    + (f" (waited {waited:g}s)" if waited else ""),
                    "one rollout per fleet at a time: wait for it with --lock-wait SECONDS")


@contextlib.contextmanager
def local_lock(fleet_key: str, command: str, wait: float = 0.0, reporter: Reporter = QUIET) -> Iterator[None]:
    """Hold this machine's lock of the fleet for the block (E-FLEET-004 when another command has it)."""
    import getpass
    import socket

    path = lock_path(fleet_key)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + max(0.0, wait)
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(path)
                if time.monotonic() >= deadline:
                    raise busy(fleet_key, "from this machine", describe(holder), wait) from None
                if not told:
                    reporter.note(f"fleet {fleet_key} is being rolled by {describe(holder)}: waiting up to {wait:g}s")
                    told = True
                time.sleep(POLL)
        me = {"command": command, "pid": os.getpid(), "host": socket.gethostname(), "user": getpass.getuser(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        tmp = path.with_suffix(f".holder.{os.getpid()}")
        tmp.write_text(json.dumps(me) + "\n")
        os.replace(tmp, path.with_suffix(".holder"))
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor (and with the process, however it ends)
