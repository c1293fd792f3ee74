"""Fleet-wide lifecycle commands: `mur deploy status|stop|destroy|rollback|logs NAME` act on every
deployment of a capsule or fleet (narrowed by `--only`), each through the single-deployment
operation, all targets at once, under the fleet lock for the ones that change something.

Each returns plain data: one entry per deployment, with its address (`hello@web-1`), its result or
its error; one target's failure never hides the others' results.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from mur.deploy import operations
from mur.deploy.providers.base import Context
from mur.deploy.state import Deployment, DeploymentStore, fleet_key, fleet_tag, named
from mur.errors import MurError
from mur.fleet.address import resolve_many
from mur.fleet.lock import local_lock
from mur.fleet.rollout import Labelled
from mur.progress import QUIET, Reporter


def address(dep: Deployment) -> str:
    where = fleet_tag(dep).get("target") or dep.target.host or dep.provider
    return f"{dep.name}@{where}"


def covers_many(ident: str, store: DeploymentStore | None = None) -> bool:
    """True when `ident` names a capsule or fleet with a deployment here (not a single id or address)."""
    if "@" in ident or ident.startswith("dep_"):
        return False
    return bool(named((store or DeploymentStore()).load(), ident))


def _each(deps: list[Deployment], fn: Callable[[Deployment], dict[str, Any]]) -> list[dict[str, Any]]:
    def one(dep: Deployment) -> dict[str, Any]:
        base = {"address": address(dep), "deployment_id": dep.deployment_id, "target": fleet_tag(dep).get("target"),
                "fleet": fleet_key(dep)}
        try:
            return {**fn(dep), **base, "ok": True}
        except MurError as err:
            return {**base, "ok": False, "code": err.code, "error": err.message}
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(deps)))) as pool:
        return list(pool.map(one, deps))


def _locked(deps: list[Deployment], command: str, wait: float, reporter: Reporter,
            fn: Callable[[Deployment], dict[str, Any]]) -> list[dict[str, Any]]:
    keys = sorted({fleet_key(d) for d in deps if fleet_key(d)})
    if not keys:
        return _each(deps, fn)
    with local_lock(keys[0], command, wait, reporter):  # a fleet command acts on one fleet (resolve_many)
        return _each(deps, fn)


def targets(ident: str, only: list[str] | None = None, store: DeploymentStore | None = None) -> list[Deployment]:
    deps = resolve_many((store or DeploymentStore()).load(), ident, only)
    keys = {fleet_key(d) for d in deps}
    if len(keys) > 1 and len(deps) > 1:
        shown = ", ".join(sorted(str(k) for k in keys))
        raise MurError("E-DEPLOY-008", f"'{ident}' covers deployments of several fleets ({shown})",
                       "name one: NAME.DESTINATION, or an id")
    return deps


def _context(dep: Deployment, reporter: Reporter, lock_wait: float = 0.0) -> Context:
    """A context per deployment: its own labelled reporter (targets work at once), the lock wait."""
    return Context(reporter=Labelled(reporter, address(dep)), lock_wait=lock_wait)


def status(ident: str, only: list[str] | None = None, reporter: Reporter = QUIET) -> list[dict[str, Any]]:
    return _each(targets(ident, only),
                 lambda d: operations.status(d.deployment_id, ctx=_context(d, reporter)))


def stop(ident: str, only: list[str] | None = None, reporter: Reporter = QUIET, lock_wait: float = 0.0
         ) -> list[dict[str, Any]]:
    return _locked(targets(ident, only), f"mur deploy stop {ident}", lock_wait, reporter,
                   lambda d: operations.stop(d.deployment_id, ctx=_context(d, reporter, lock_wait)))


def rollback(ident: str, only: list[str] | None = None, reporter: Reporter = QUIET, lock_wait: float = 0.0
             ) -> list[dict[str, Any]]:
    def one(d: Deployment) -> dict[str, Any]:
        ctx = _context(d, reporter, lock_wait)
        return operations.rollback(d.deployment_id, timeout=ctx.timeout, ctx=ctx)
    return _locked(targets(ident, only), f"mur deploy rollback {ident}", lock_wait, reporter, one)


def destroy(ident: str, only: list[str] | None = None, reporter: Reporter = QUIET, force: bool = False,
            lock_wait: float = 0.0) -> list[dict[str, Any]]:
    return _locked(targets(ident, only), f"mur deploy destroy {ident}", lock_wait, reporter,
                   lambda d: operations.destroy(d.deployment_id, force=force, ctx=_context(d, reporter, lock_wait)))


class _Lines:
    """Cuts a target's byte stream into lines and hands each one on with the target's label."""

    def __init__(self, label: str, emit: Callable[[str, str], None]):
        self.label, self.emit, self.pending = label, emit, b""

    def __call__(self, data: bytes) -> None:
        self.pending += data
        *done, self.pending = self.pending.split(b"\n")
        for line in done:
            self.emit(self.label, line.decode("utf-8", "replace"))

    def flush(self) -> None:
        if self.pending:
            self.emit(self.label, self.pending.decode("utf-8", "replace"))
            self.pending = b""


def logs(ident: str, emit: Callable[[str, str], None], lines: int = 200, follow: bool = False,
         only: list[str] | None = None) -> list[dict[str, Any]]:
    """Every target's service log, line by line through `emit(address, line)` (serialized: lines of
    different targets never mix); with `follow`, until interrupted."""
    deps = targets(ident, only)
    lock = threading.Lock()

    def safe_emit(label: str, line: str) -> None:
        with lock:
            emit(label, line)

    def one(dep: Deployment) -> dict[str, Any]:
        cut = _Lines(address(dep), safe_emit)
        text = operations.logs(dep.deployment_id, lines, follow, cut)
        if text:
            cut(text.encode() + (b"" if text.endswith("\n") else b"\n"))
        cut.flush()
        return {}

    return _each(deps, one)
