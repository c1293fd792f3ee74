"""One command's hold on one host deployment: the connection, the deployment's lock, the layout,
the service, and what is true there (mur.deploy.observe).

    s = HostSession(ctx, spec, dep_id, command="mur deploy rollback").open()
    s.take_lock()                       # E-DEPLOY-013 naming the holder when another command has it
    truth, view = s.truth(dep)          # current, complete releases, leftovers, the serving release
    ...
    s.close()                           # releases the lock (it also goes with this process)

After a failure `regain(budget)` gives a working connection holding the lock again (a fresh
connection when the old one is dead), and says whether anyone else held the lock in between.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from mur.deploy.lock import TargetLock
from mur.deploy.observe import HostView, Truth, derive, observe_command, parse_observation
from mur.deploy.providers.base import Context, Service, endpoint_check
from mur.deploy.state import Deployment, Release
from mur.deploy.steps import Layout, ServiceState
from mur.deploy.targets import TargetSpec
from mur.deploy.targets.base import Target
from mur.errors import MurError


def release_pin(meta: dict[str, Any], fallback: str | None) -> str | None:
    """The TLS pin a release serves (its release.json says; one from before that: the record's)."""
    return (meta.get("tls_pin") or None) if "tls_pin" in meta else fallback


class HostSession:
    def __init__(self, ctx: Context, spec: TargetSpec, dep_id: str, *, command: str, home: str = "",
                 init: str = "supervisor", sudo: bool = False, helper: bool = False, trust_new_host: bool = False):
        self.ctx, self.spec, self.dep_id, self.command = ctx, spec, dep_id, command
        self.home, self.init, self.sudo, self.helper, self.trust = home, init, sudo, helper, trust_new_host
        self.t: Target | None = None
        self.lock: TargetLock | None = None

    @classmethod
    def of(cls, ctx: Context, dep: Deployment, command: str) -> "HostSession":
        return cls(ctx, dep.target, dep.deployment_id, command=command, home=dep.home, init=dep.init, sudo=dep.sudo,
                   helper=dep.helper)

    # connection and lock ------------------------------------------------------------------------

    def open(self) -> "HostSession":
        self.t = self.ctx.open(self.spec, self.trust)
        self.t.helper = self.helper
        self.configure(self.init, self.sudo, self.helper)
        return self

    def configure(self, init: str, sudo: bool, helper: bool) -> None:
        assert self.t is not None
        self.init, self.sudo, self.helper = init, sudo, helper
        self.t.helper = helper
        self.lay = Layout(self.home or self.t.home, self.dep_id)
        self.svc = Service(self.t, self.lay, init, sudo and not self.t.is_root)

    def take_lock(self, shared: bool = False, wait: float | None = None) -> TargetLock:
        assert self.t is not None
        with self.ctx.phase("lock", f"lock {self.dep_id} on {self.t.label}", self.t):
            self.lock = TargetLock(self.t, self.dep_id, command=self.command,
                                   wait=self.ctx.lock_wait if wait is None else wait, shared=shared,
                                   reporter=self.ctx.reporter, deadlines=self.ctx.deadlines,
                                   what=f"deployment {self.dep_id}",
                                   on_wait=lambda h: self.ctx.event("waiting", step="lock",
                                                                    holder=h.to_dict() if h else None)).acquire()
        return self.lock

    @property
    def token(self) -> str:
        return self.lock.token if self.lock else ""

    def regain(self, budget: float) -> bool:
        """A working connection that holds the lock again, within `budget` seconds; True when nobody
        else held the lock since this command lost it (so undoing its steps is still right)."""
        assert self.t is not None
        deadline = time.monotonic() + budget
        if self.lock is not None and not self.lock.lost and self.t.alive(min(3.0, budget)):
            return True
        mine = self.token
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        left = max(1.0, deadline - time.monotonic())
        self.t.reconnect(budget=min(self.ctx.deadlines.connect_budget, left))
        self.take_lock(wait=max(0.0, deadline - time.monotonic() - 0.5))
        prev = self.lock.previous if self.lock else None
        return prev is not None and prev.token == mine

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if self.t is not None:
            self.t.close()

    def __enter__(self) -> "HostSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # what is true ---------------------------------------------------------------------------

    def observe(self, port: int | None) -> HostView:
        assert self.t is not None
        res = self.t.run(observe_command(self.lay, port), check=False, what="observe the deployment")
        return parse_observation(res.stdout, self.lay)

    def state(self) -> ServiceState:
        return self.svc.state()

    def health(self, port: int | None, token: bytes | None, pin: str | None, wait: float = 3.0) -> dict[str, Any]:
        assert self.t is not None
        if not port:
            return {"ok": False, "error": "no service port recorded"}
        try:
            return endpoint_check(self.t, int(port), token, pin, wait)
        except MurError as err:
            return {"ok": False, "error": err.message}

    def truth(self, dep: Deployment, token: bytes | None, own: bool = False
              ) -> tuple[Truth, HostView, ServiceState, dict[str, Any]]:
        """Everything `status` shows, and the state derived from it (`own`: this command holds the lock)."""
        port = int(dep.service_port or 0) or None
        view = self.observe(port)
        st = self.state()
        pin = release_pin(view.meta(view.serving if view.serving is not None else view.current), dep.tls_pin)
        card = self.health(port, token, pin) if (st.running or view.listener) else \
            {"ok": False, "error": "service not running"}
        record = dep.release.n if dep.release is not None else None
        truth = derive(view, st, bool(card.get("ok")), record, dep.pending, self.token if own else "")
        return truth, view, st, card



def follow_truth(dep: Deployment, truth: Truth, view: HostView) -> Callable[[Deployment], None]:
    """How the record follows what `status` found (applied under the records' lock)."""

    def change(d: Deployment) -> None:
        d.status = truth.state
        settled = truth.state in ("running", "starting", "crash-looping", "stopped") and truth.locked_by is None
        if truth.consistent or (settled and not d.pending):
            n = view.current
            if n is not None and n in view.releases:
                if d.release is not None and d.release.n != n:
                    d.previous = d.release
                meta = view.meta(n)
                d.release = Release.from_dict(meta)
                cap = meta.get("capsule") or {}
                d.name, d.version = cap.get("name") or d.name, cap.get("version") or d.version
                d.tls_pin = release_pin(meta, d.tls_pin)
            if truth.consistent:
                d.pending = None
    return change
