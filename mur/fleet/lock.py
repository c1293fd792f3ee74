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


class TargetLocks:
    """The fleet's lock on every target (`fleet-<fleet>`, mur.deploy.lock), taken in a fixed order and
    held, each over its own connection, until `release` (or until this process or its links die)."""

    def __init__(self, fleet_key: str, command: str, wait: float, ctx: Any):
        self.key, self.command, self.wait, self.ctx = fleet_key, command, wait, ctx
        self.held: list[tuple[Any, Any]] = []  # (target, TargetLock)

    @property
    def name(self) -> str:
        return f"fleet-{self.key}"

    def take(self, spec: Any, label: str) -> None:
        """Connect and lock one target (call in sorted label order); E-FLEET-004 when another rollout holds it."""
        from mur.deploy.lock import TargetLock
        from mur.deploy.targets import TargetSpec

        # a Docker target's engine is this machine's: the lock lives here
        t = self.ctx.connect(spec if spec.provider == "ssh" else TargetSpec("local"), note=self.ctx.reporter.note)
        try:
            lock = TargetLock(t, self.name, command=self.command, wait=self.wait, reporter=self.ctx.reporter,
                              deadlines=self.ctx.deadlines, what=f"fleet {self.key}").acquire()
        except MurError as err:
            t.close()
            if err.code == "E-DEPLOY-013":
                raise MurError("E-FLEET-004", err.message.replace(f"fleet {self.key} is locked", f"fleet {self.key} is being rolled"),
                               "one rollout per fleet at a time: wait for it with --lock-wait SECONDS") from err
            raise
        self.held.append((t, lock))
        self.ctx.reporter.note(f"{label}: holding the lock of fleet {self.key}")

    def release(self) -> None:
        for t, lock in reversed(self.held):
            try:
                lock.release()
            finally:
                t.close()
        self.held = []
