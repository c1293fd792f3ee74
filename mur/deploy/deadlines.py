"""How long deploy waits for anything on a target: one value per kind of wait, from the environment.

Every wait that crosses a link has a deadline, so a cut or silent link fails within a bounded,
documented time (E-DEPLOY-003 naming the step) instead of hanging. The defaults suit a real
network; the fault tests shorten them through the environment (docs/deploy.md, "Deadlines").

    MUR_DEPLOY_CONNECT_TIMEOUT   one connection attempt: TCP, SSH handshake, authentication   (10 s)
    MUR_DEPLOY_CONNECT_BUDGET    all attempts of one connect, with backoff                    (30 s)
    MUR_DEPLOY_KEEPALIVE         a keepalive (SSH request that wants a reply; lock heartbeat)  (5 s)
    MUR_DEPLOY_DEAD_AFTER        silence after which the link counts as dead                  (20 s)
    MUR_DEPLOY_COMMAND_TIMEOUT   one remote command that has no deadline of its own           (300 s)
    MUR_DEPLOY_UPLOAD_STALL      one upload making no progress                               (60 s)
    MUR_DEPLOY_UNDO_BUDGET       the whole undo after a failure or Ctrl-C                     (10 s)
    MUR_DEPLOY_START_TIMEOUT     the default of --start-timeout (startup JSON + agent card)   (180 s)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from mur.errors import MurError

ENV = {
    "connect": "MUR_DEPLOY_CONNECT_TIMEOUT",
    "connect_budget": "MUR_DEPLOY_CONNECT_BUDGET",
    "keepalive": "MUR_DEPLOY_KEEPALIVE",
    "dead_after": "MUR_DEPLOY_DEAD_AFTER",
    "command": "MUR_DEPLOY_COMMAND_TIMEOUT",
    "upload_stall": "MUR_DEPLOY_UPLOAD_STALL",
    "undo": "MUR_DEPLOY_UNDO_BUDGET",
    "start": "MUR_DEPLOY_START_TIMEOUT",
}


@dataclass(frozen=True)
class Deadlines:
    connect: float = 10.0
    connect_budget: float = 30.0
    keepalive: float = 5.0
    dead_after: float = 20.0
    command: float = 300.0
    upload_stall: float = 60.0
    undo: float = 10.0
    start: float = 180.0

    @property
    def lock_release(self) -> float:
        """How long the target keeps a lock whose holder's heartbeats stopped: a little longer than
        this side takes to call the link dead, so the holder always notices first."""
        return self.dead_after + self.keepalive

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Deadlines":
        env = os.environ if env is None else env
        values: dict[str, float] = {}
        for f in fields(cls):
            raw = env.get(ENV[f.name], "").strip()
            if not raw:
                continue
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if not value > 0:
                raise MurError("E-DEPLOY-001", f"{ENV[f.name]}={raw!r} is not a positive number of seconds",
                           "unset it for the default, or give seconds, e.g. 15")
            values[f.name] = value
        out = cls(**values)
        if out.dead_after <= out.keepalive:
            raise MurError("E-DEPLOY-001", f"{ENV['dead_after']} ({out.dead_after:g}s) must be longer than "
                           f"{ENV['keepalive']} ({out.keepalive:g}s)")
        return out


def current() -> Deadlines:
    """The deadlines in force (read from the environment each time: tests change it)."""
    return Deadlines.from_env()
