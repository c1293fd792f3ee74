"""A rolling deploy of one capsule to a fleet: preflight everywhere, then batches, each target gated.

    1. lock the fleet (mur.fleet.lock);
    2. preflight every selected target at once: if any fails, stop before anything changed (with
       --skip-unreachable, targets that cannot be reached are left out instead, and reported);
    3. per batch, deploy to its targets at once (each deploy is the single-target deploy, with its own
       lock, undo and record), then gate each one: its service answers with the token and the smoke
       task completes; the next batch starts only when every target of this one passed;
    4. on a failure, stop: no further batch starts, and (rollout.rollback, on by default) the targets
       this rollout switched go back to their previous release (a target that had none is removed),
       so every target serves what it served before;
    5. the report: per target, old -> new, time, result.

The runtime and the precompiled components are resolved once per platform and shared by every target
(the first target of a platform prepares them; the others wait for it instead of redoing the work).
"""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from mur.deploy import operations
from mur.deploy.providers.base import Context
from mur.deploy.request import DeployRequest
from mur.deploy.state import Deployment, DeploymentStore, fleet_tag
from mur.deploy.targets import TargetSpec
from mur.errors import MurError
from mur.fleet import gate
from mur.fleet.lock import TargetLocks, local_lock
from mur.fleet.plan import FleetPlan, TargetPlan
from mur.progress import Reporter

# Errors that mean "could not reach the target" (for --skip-unreachable): a link or host-key failure.
UNREACHABLE = ("E-DEPLOY-003", "E-DEPLOY-009", "E-DEPLOY-010")


class Labelled:
    """A reporter whose lines say which target they are about (targets work at once)."""

    def __init__(self, inner: Reporter, label: str):
        self.inner, self.label = inner, label

    def note(self, text: str) -> None:
        self.inner.note(f"{self.label}: {text}")

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[None]:
        with self.inner.step(f"{self.label}: {text}"):
            yield


@dataclass
class TargetResult:
    name: str
    where: str
    deployment_id: str | None = None
    old_version: str | None = None
    old_release: Any = None
    new_version: str | None = None
    new_release: Any = None
    result: str = "not started"  # deployed | unchanged | failed | rolled back | removed | skipped | not started
    elapsed: float | None = None
    error: str | None = None
    switched: bool = False  # this rollout changed what it serves
    had_release: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.name, "where": self.where, "deployment_id": self.deployment_id,
                "old": {"version": self.old_version, "release": self.old_release},
                "new": {"version": self.new_version, "release": self.new_release},
                "result": self.result, "elapsed": self.elapsed, "error": self.error}


@dataclass
class FleetReport:
    fleet: str
    ok: bool
    targets: list[TargetResult]
    stopped_at: str | None = None  # the target whose failure stopped the rollout
    error: str | None = None
    code: str | None = None
    elapsed: float = 0.0
    left_out: list[str] = field(default_factory=list)  # targets of the file not selected

    def to_dict(self) -> dict[str, Any]:
        return {"fleet": self.fleet, "ok": self.ok, "stopped_at": self.stopped_at, "error": self.error,
                "code": self.code, "elapsed": round(self.elapsed, 2), "left_out": self.left_out,
                "targets": [t.to_dict() for t in self.targets]}


@dataclass(frozen=True)
class Options:
    """What the command line says for every target (the fleet file says the rest)."""

    common: dict[str, Any] = field(default_factory=dict)  # DeployRequest fields: release_source, start_timeout...
    skip_unreachable: bool = False
    lock_wait: float = 0.0
    rollback: bool | None = None  # None: the fleet file's rollout.rollback
    command: str = "mur deploy"


class Shared:
    """The runtime and precompiled components per platform, prepared once for all targets."""

    def __init__(self, ctx: Context):
        self.runtime_fn, self.precompile_fn = ctx.runtime, ctx.precompile
        self._lock = threading.Lock()
        self._keys: dict[Any, threading.Lock] = {}
        self._done: dict[Any, Any] = {}

    def _once(self, key: Any, make: Callable[[], Any]) -> Any:
        with self._lock:
            lock = self._keys.setdefault(key, threading.Lock())
        with lock:
            if key not in self._done:
                self._done[key] = make()
            return self._done[key]

    def runtime(self, req, cap, plat, note):  # noqa: ANN001, ANN201 - Context.runtime's signature
        return self._once(("runtime", cap.mur_version, plat, req.release_source, str(req.mur_binary), req.use_bundle,
                           req.target.provider == "local"), lambda: self.runtime_fn(req, cap, plat, note))

    def precompile(self, req, cap, plat, reporter):  # noqa: ANN001, ANN201
        return self._once(("precompile", plat, req.target.provider == "local", req.precompile,
                           tuple(str(p) for p in cap.wasm_sources())),
                          lambda: self.precompile_fn(req, cap, plat, reporter))


def existing_for(records: list[Deployment], plan: FleetPlan, t: TargetPlan) -> Deployment | None:
    """The deployment this target's deploy updates: the one tagged with this fleet and target, else
    one of the same manifest on the same place (a deploy made before the fleet file existed)."""
    for rec in reversed(records):
        tag = fleet_tag(rec)
        if tag.get("name") == plan.name and tag.get("destination") == plan.destination and tag.get("target") == t.name:
            return rec
    for rec in reversed(records):
        if rec.manifest_path == str(plan.manifest) and rec.target.same_place(t.spec) and not fleet_tag(rec):
            return rec
    return None


def request_for(plan: FleetPlan, t: TargetPlan, opts: Options, existing: Deployment | None) -> DeployRequest:
    common = dict(opts.common)
    for key in ("publish", "tls", "init"):
        common.pop(key, None)
    if t.base_image:
        common["base_image"] = t.base_image
    if t.no_boot_hook:
        common["no_boot_hook"] = True
    env = tuple(f"{k}={v}" for k, v in t.env)
    return DeployRequest(manifest=plan.manifest, target=t.spec, env_args=env, front=plan.front,
                         env_file=None if env else Path("/dev/null"),  # the fleet file says it all: no .env fallback
                         publish=t.publish or bool(opts.common.get("publish")), tls=t.tls or opts.common.get("tls"),
                         init=t.init if t.init != "auto" else str(opts.common.get("init") or "auto"),
                         deployment_id=existing.deployment_id if existing else None, **common)


class Rollout:
    def __init__(self, plan: FleetPlan, opts: Options, reporter: Reporter, ctx: Context | None = None):
        self.plan, self.opts, self.r = plan, opts, reporter
        self.ctx = ctx or Context(reporter=reporter)
        self.shared = Shared(self.ctx)
        self.store: DeploymentStore = self.ctx.store
        self.results = {t.name: TargetResult(t.name, t.where) for t in plan.targets}
        self.requests: dict[str, DeployRequest] = {}

    def _ctx(self, t: TargetPlan, timeout: float) -> Context:
        smoke = self.plan.smoke
        check = None if smoke is None else (lambda target, port, token, pin: gate.check(target, port, token, pin, smoke))
        return replace(self.ctx, reporter=Labelled(self.r, t.name), runtime=self.shared.runtime,
                       precompile=self.shared.precompile, timeout=timeout, gate=check)

    def run(self) -> FleetReport:
        t0 = time.monotonic()
        report = FleetReport(self.plan.key, ok=False, targets=list(self.results.values()),
                             left_out=[n for n in self.plan.all_targets if n not in self.results])
        locks = TargetLocks(self.plan.key, self.opts.command, self.opts.lock_wait, self.ctx)
        try:
            with local_lock(self.plan.key, self.opts.command, self.opts.lock_wait, self.r):
                self._prepare()
                targets = self._preflight(report, self._lock(locks, report))
                self._roll(targets, report)
        except MurError as err:
            report.error, report.code = err.message, err.code
        finally:
            locks.release()
        report.ok = report.error is None
        report.elapsed = time.monotonic() - t0
        return report

    # --- 1. requests ----------------------------------------------------------------------------------

    def _prepare(self) -> None:
        records = self.store.load()
        for t in self.plan.targets:
            existing = existing_for(records, self.plan, t)
            res = self.results[t.name]
            if existing is not None:
                res.deployment_id = existing.deployment_id
                res.old_version = existing.version if existing.release else None
                res.old_release = existing.release.ident if existing.release else None
                res.had_release = existing.release is not None
            self.requests[t.name] = request_for(self.plan, t, self.opts, existing)

    # --- 2. lock and preflight everywhere -------------------------------------------------------------

    def _lock(self, locks: TargetLocks, report: FleetReport) -> dict[str, MurError]:
        """The fleet's lock on every target, in a fixed order (one per machine); what could not be locked."""
        failed: dict[str, MurError] = {}
        places: dict[str, str] = {}
        for t in self.plan.targets:
            places.setdefault(t.spec.label if t.kind == "ssh" else "this machine", t.name)
        with self.r.step(f"lock fleet {self.plan.key} on {len(places)} machine(s)"):
            for place in sorted(places):
                t = next(x for x in self.plan.targets if x.name == places[place])
                try:
                    locks.take(t.spec, place)
                except MurError as err:
                    if err.code == "E-FLEET-004":
                        report.stopped_at = t.name
                        raise
                    for x in self.plan.targets:
                        if (x.spec.label if x.kind == "ssh" else "this machine") == place:
                            failed[x.name] = err
        return failed

    def _preflight(self, report: FleetReport, unlocked: dict[str, MurError]) -> list[TargetPlan]:
        def one(t: TargetPlan) -> tuple[TargetPlan, Any]:
            if t.name in unlocked:
                return t, unlocked[t.name]
            try:
                return t, operations.check(self.requests[t.name], ctx=self._ctx(t, 60))
            except MurError as err:
                return t, err

        with self.r.step(f"preflight {len(self.plan.targets)} target(s) of fleet {self.plan.key}"):
            with ThreadPoolExecutor(max_workers=min(16, len(self.plan.targets))) as pool:
                outcomes = list(pool.map(one, self.plan.targets))
        ready, failures = [], []
        for t, out in outcomes:
            res = self.results[t.name]
            if isinstance(out, MurError):
                if self.opts.skip_unreachable and out.code in UNREACHABLE:
                    res.result, res.error = "skipped", f"unreachable: {out.message}"
                    self.r.note(f"{t.name}: unreachable, left out (--skip-unreachable): {out.message.splitlines()[0]}")
                    continue
                res.error = f"error[{out.code}]: {out.message}"
                failures.append(t.name)
            elif not out.ok:
                res.error = "preflight failed: " + "; ".join(f"{c.name}: {c.detail}" for c in out.checks
                                                             if c.fatal and not c.ok)
                failures.append(t.name)
            else:
                ready.append(t)
        if failures:
            report.stopped_at = failures[0]
            raise MurError("E-FLEET-005", f"preflight failed on {', '.join(failures)}: nothing was changed on any target",
                           "fix those targets (or narrow the rollout with --only), then deploy again"
                           + ("; --skip-unreachable leaves out targets that cannot be reached"
                              if not self.opts.skip_unreachable else ""))
        if not ready:
            raise MurError("E-FLEET-005", "no target of the fleet could be reached: nothing was changed")
        return ready

    # --- 3. batches -----------------------------------------------------------------------------------

    def _roll(self, targets: list[TargetPlan], report: FleetReport) -> None:
        n = max(1, self.plan.batch_size())
        batches = [targets[i:i + n] for i in range(0, len(targets), n)]
        for i, batch in enumerate(batches, 1):
            names = ", ".join(t.name for t in batch)
            with self.r.step(f"batch {i}/{len(batches)}: {names}"):
                with ThreadPoolExecutor(max_workers=len(batch)) as pool:
                    list(pool.map(self._one, batch))
            failed = [t.name for t in batch if self.results[t.name].result == "failed"]
            if failed:
                report.stopped_at = failed[0]
                self._stop(report, failed)
                return

    def _one(self, t: TargetPlan) -> None:
        res = self.results[t.name]
        req = self.requests[t.name]
        ctx = self._ctx(t, req.start_timeout)
        t0 = time.monotonic()
        try:
            out = operations.deploy(req, ctx=ctx)
            res.deployment_id = out["deployment_id"]
            res.new_version, res.new_release = out.get("version"), out.get("release")
            res.switched = not out.get("unchanged")
            self._tag(t, out["deployment_id"])
            verdict = self._gate(t, out)
            if not verdict.get("ok"):
                res.result, res.error = "failed", f"gate: {verdict.get('error')}"
            else:
                res.result = "unchanged" if out.get("unchanged") else "deployed"
        except MurError as err:
            res.result, res.error = "failed", f"error[{err.code}]: {err.message}"
        except Exception as exc:  # noqa: BLE001 - one target's surprise must not leave the others unreported
            res.result, res.error = "failed", f"{type(exc).__name__}: {exc}"
        res.elapsed = round(time.monotonic() - t0, 2)

    def _gate(self, t: TargetPlan, out: dict[str, Any]) -> dict[str, Any]:
        from mur.deploy.providers.base import read_token

        dep = self.store.get(out["deployment_id"])
        if dep is None or not dep.service_port:
            return {"ok": False, "error": "the deployment has no record"}
        token = read_token(dep)
        # what clients reach: the front when there is one; a Docker service listens on the host network,
        # so this machine's loopback reaches it
        port = int(dep.client_port or 0)
        spec = dep.target if dep.provider == "ssh" else TargetSpec("local")
        with Labelled(self.r, t.name).step("gate: health" + (" + smoke task" if self.plan.smoke else "")):
            with self.ctx.connect(spec, note=self.r.note) as target:
                return gate.check(target, port, token.decode() if token else None, dep.tls_pin, self.plan.smoke)

    def _tag(self, t: TargetPlan, dep_id: str) -> None:
        dep = self.store.get(dep_id)
        if dep is not None:
            dep.extra["fleet"] = t.tag(self.plan)
            self.store.save(dep)

    # --- 4. stop and return ---------------------------------------------------------------------------

    def _stop(self, report: FleetReport, failed: list[str]) -> None:
        first = self.results[failed[0]]
        report.code = "E-FLEET-006"
        report.error = f"the rollout stopped at {failed[0]}: {first.error}"
        back = self.plan.rollback if self.opts.rollback is None else self.opts.rollback
        switched = [r for r in self.results.values() if r.switched]
        if not back:
            report.error += "; targets already switched keep the new release (rollback: false)"
            return
        if not switched:
            return

        def undo(res: TargetResult) -> None:
            assert res.deployment_id is not None
            t = next(x for x in self.plan.targets if x.name == res.name)
            ctx = self._ctx(t, self.ctx.timeout)
            try:
                if res.had_release:  # exactly the release it served before this rollout
                    to = res.old_release if isinstance(res.old_release, int) else None
                    operations.rollback(res.deployment_id, timeout=ctx.timeout, to=to, ctx=ctx)
                    res.result = "rolled back"
                else:
                    operations.destroy(res.deployment_id, ctx=ctx)
                    res.result = "removed"
                res.new_version, res.new_release = res.old_version, res.old_release
            except MurError as err:
                res.error = (res.error + "; " if res.error else "") + f"returning it failed: error[{err.code}]: {err.message}"

        with self.r.step(f"return {len(switched)} switched target(s) to their previous release"):
            with ThreadPoolExecutor(max_workers=len(switched)) as pool:
                list(pool.map(undo, switched))



def preflight_only(plan: FleetPlan, opts: Options, reporter: Reporter, ctx: Context | None = None
                   ) -> list[dict[str, Any]]:
    """`mur deploy --check` for a fleet: every target's preflight report (nothing is changed)."""
    r = Rollout(plan, opts, reporter, ctx)
    r._prepare()

    def one(t: TargetPlan) -> dict[str, Any]:
        try:
            rep = operations.check(r.requests[t.name], ctx=r._ctx(t, 60))
        except MurError as err:
            return {"target": t.name, "ok": False, "code": err.code, "error": err.message}
        return {"target": t.name, **rep.to_dict(), "render": f"{t.name}: " + rep.render()}

    with ThreadPoolExecutor(max_workers=min(16, len(plan.targets))) as pool:
        return list(pool.map(one, plan.targets))
