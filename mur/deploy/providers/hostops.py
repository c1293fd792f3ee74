"""The lifecycle commands on SSH hosts and this machine: status, logs, start, stop, rollback,
destroy, gc (the deploy itself is mur.deploy.providers.host).

Every command that changes the target holds the deployment's lock (--lock-wait), and reads what
is true there before it acts: `status` derives the state from the serving process, `rollback`
finds its release among the complete releases on the target, `start` restarts what `current`
names when something else serves. The record follows what is true.
"""

from __future__ import annotations

import shlex
from typing import Any, Callable

from mur.deploy import fronted
from mur.deploy.apply import apply_steps, run_step
from mur.deploy.cleanup import collect_step, destroy_steps, gc_shared_command, sweep_command
from mur.deploy.lock import TargetLock
from mur.deploy.observe import HostView
from mur.deploy.preflight import Report
from mur.deploy.providers.base import Context, DeployJob, Outcome, read_token, undo_or_leave
from mur.deploy.providers.host import HostDeploy
from mur.deploy.providers.hostsession import HostSession, follow_truth, release_pin
from mur.deploy.state import Deployment, Release, now_rfc3339, uninterrupted
from mur.deploy.steps import Layout, Run, ServiceConfig, Symlink
from mur.deploy.targets import TargetSpec
from mur.deploy.undo import Attempt, Phase
from mur.errors import MurError


class HostProvider:
    """`ssh` (an existing machine over SSH) and `local` (this machine)."""

    def __init__(self, kind: str):
        self.kind = kind

    def check(self, job: DeployJob) -> Report:
        return HostDeploy(job).check()

    def deploy(self, job: DeployJob) -> Outcome:
        return HostDeploy(job).run()

    def _session(self, dep: Deployment, ctx: Context, command: str) -> HostSession:
        return HostSession.of(ctx, dep, f"mur deploy {command} {dep.deployment_id}").open()

    # reading ----------------------------------------------------------------------------------

    def status(self, dep: Deployment, ctx: Context) -> dict[str, Any]:
        with self._session(dep, ctx, "status") as s:
            truth, view, st, card = s.truth(dep, read_token(dep))
            f = fronted.for_record(s.t, s.lay, dep, s.svc.sudo, read_token(dep), ctx.reporter)
            front = f.status() if f is not None else None
        if front is not None and not front["alive"] and truth.state in ("running", "diverged"):  # clients get no answer
            dead = (f"the front (port {front['port']}) is not running: the service answers on its private "
                    f"port only; `mur deploy start` or the next deploy starts it")
            truth.reason = dead if truth.state == "running" else f"{truth.reason}; and {dead}"
            truth.state, truth.consistent = "diverged", False
        with uninterrupted():
            ctx.store.update(dep.deployment_id, follow_truth(dep, truth, view))
        out = {"status": truth.state, "state": truth.to_dict(), "service": st.to_dict(),
               "agent_card_ok": bool(card.get("ok")), "agent_card": card.get("agent_card"),
               "error": None if card.get("ok") else card.get("error"),
               "releases": sorted(view.releases), "current": view.current, "serving": view.serving}
        if front is not None:
            out["front"] = front
        return out

    def logs(self, dep: Deployment, lines: int, follow: bool, sink: Callable[[bytes], None] | None,
             ctx: Context) -> str:
        with self._session(dep, ctx, "logs") as s:
            assert s.t is not None
            step = s.svc.init.logs(s.lay, lines, follow, s.svc.sudo)
            if follow and sink is not None:
                s.t.stream(s.t.elevated(step.cmd, step.helper) if step.sudo else step.cmd, sink)
                return ""
            res = run_step(s.t, step)
            return res.stdout + (res.stderr if res.rc else "")

    # changing ---------------------------------------------------------------------------------

    def start(self, dep: Deployment, ctx: Context) -> Deployment:
        with self._session(dep, ctx, "start") as s:
            s.take_lock()
            view = s.observe(dep.service_port)
            if view.current is None or view.current not in view.releases:
                raise MurError("E-DEPLOY-004", f"{dep.deployment_id} has no complete release to start on {s.t.label}",
                               "deploy it again")
            st = s.state()
            restart = (view.serving is not None and view.serving != view.current) or st.looping
            pin = release_pin(view.meta(view.current), dep.tls_pin)
            with ctx.phase("start", f"start release {view.current}", s.t, release=view.current):
                _activate(s, dep, view.current, restart=restart)
                card = s.svc.wait(int(dep.service_port or 0), read_token(dep), pin, ctx.timeout)
                if not card.get("ok"):
                    raise s.svc.failed(card, "see `mur deploy logs`")
                f = fronted.for_record(s.t, s.lay, dep, s.svc.sudo, read_token(dep), ctx.reporter)
                if f is not None:
                    f.ensure(view.current)
            meta = view.meta(view.current)

        def change(d: Deployment) -> None:
            d.status = "running"
            d.release = Release.from_dict(meta)
            d.tls_pin = pin
        with uninterrupted():
            return ctx.store.update(dep.deployment_id, change) or dep

    def stop(self, dep: Deployment, ctx: Context) -> Deployment:
        with self._session(dep, ctx, "stop") as s:
            s.take_lock()
            with ctx.phase("stop", f"stop {dep.deployment_id}", s.t):
                if fronted.recorded(dep):  # the address closes first: no request reaches a stopping service
                    apply_steps(s.t, [Run(fronted.remove_command(s.lay), sudo=s.svc.sudo, check=False,
                                          label="stop the front and the twin")])
                apply_steps(s.t, s.svc.init.stop(s.lay, s.svc.sudo))

        def change(d: Deployment) -> None:
            d.status = "stopped"
        with uninterrupted():
            return ctx.store.update(dep.deployment_id, change) or dep

    def destroy(self, dep: Deployment, ctx: Context) -> None:
        with self._session(dep, ctx, "destroy") as s:
            s.take_lock()
            assert s.t is not None and s.lock is not None
            with ctx.phase("destroy", f"destroy {dep.deployment_id}", s.t):
                apply_steps(s.t, destroy_steps(s.lay, dep.init, s.svc.sudo, keep_bundles=self.kind == "local"))
                if s.t.exists(s.lay.root):
                    raise MurError("E-DEPLOY-003", f"{s.lay.root} is still present on {s.t.label} after destroy")
                s.lock.remove_files()  # still held until this command ends; then the shared files nobody uses
                run_step(s.t, collect_step(s.lay, keep_bundles=self.kind == "local"))

    def rollback(self, dep: Deployment, ctx: Context, to: int | None = None) -> Deployment:
        with self._session(dep, ctx, "rollback") as s:
            s.take_lock()
            assert s.t is not None
            s.t.run(sweep_command(s.lay), check=False, what="sweep leftovers")
            view = s.observe(dep.service_port)
            cur = view.current
            if to is None:
                to = view.rollback_target()
                if to is None:
                    complete = ", ".join(str(n) for n in sorted(view.releases)) or "none"
                    raise MurError("E-DEPLOY-011", f"deployment {dep.deployment_id} has no earlier complete release "
                                   f"than release {cur} on {s.t.label} (complete releases: {complete})",
                                   "rollback needs an earlier successful deploy; `--to N` picks a release")
            elif to not in view.releases:
                complete = ", ".join(str(n) for n in sorted(view.releases)) or "none"
                raise MurError("E-DEPLOY-011", f"release {to} is not a complete release on {s.t.label} "
                               f"(complete releases: {complete})")
            return _switch(s, dep, ctx, view, to)

    def gc(self, spec: TargetSpec, ctx: Context) -> dict[str, Any]:
        """Sweep every deployment on the target whose lock is free; collect unused shared files."""
        session = HostSession(ctx, spec, "gc", command="mur deploy gc").open()
        t = session.t
        assert t is not None
        removed: list[str] = []
        skipped: list[str] = []
        try:
            base = Layout(t.home, "x")
            q = shlex.quote
            res = t.run(f"ls -1 {q(base.murmur + '/deployments')} {q(base.murmur + '/staging')} 2>/dev/null; "
                        f"cd {q(base.locks)} 2>/dev/null && ls -1 | sed -n 's/\\.lock$//p'; true", check=False,
                        what="list deployments")
            ids = sorted({x.strip() for x in res.stdout.split() if x.strip().startswith("dep_")})
            with ctx.phase("gc", f"collect leftovers on {t.label}", t):
                for dep_id in ids:
                    lay = Layout(t.home, dep_id)
                    try:
                        lock = TargetLock(t, dep_id, command="mur deploy gc", wait=0, reporter=ctx.reporter,
                                          deadlines=ctx.deadlines).acquire()
                    except MurError as err:
                        if err.code != "E-DEPLOY-013":
                            raise
                        skipped.append(f"{dep_id} (locked: {err.message.split(' by ', 1)[-1]})")
                        continue
                    try:
                        out = t.run(sweep_command(lay), check=False, what="sweep leftovers").stdout
                        removed += [f"{dep_id}: {ln[8:]}" for ln in out.splitlines() if ln.startswith("@@swept ")]
                        view = parse_view(t, lay)
                        if not view.releases and view.exists:  # nothing ever completed: a first deploy cut off
                            apply_steps(t, destroy_steps(lay, "supervisor", False, keep_bundles=self.kind == "local"))
                            removed.append(f"{dep_id}: an unfinished first deploy")
                        if not t.exists(lay.root):
                            lock.remove_files()
                    finally:
                        lock.release()
                out = t.run(gc_shared_command(base, keep_bundles=self.kind == "local"), check=False,
                            what="collect unused shared files").stdout
                removed += [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("@@gc ")]
                skipped += [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("@@busy ")]
        finally:
            session.close()
        for line in removed:
            ctx.reporter.note(f"removed {line}")
        return {"target": spec.label, "removed": removed, "skipped": skipped}


def parse_view(t: Any, lay: Layout) -> HostView:
    from mur.deploy.observe import observe_command, parse_observation

    return parse_observation(t.run(observe_command(lay, None), check=False, what="observe the deployment").stdout, lay)


def _activate(s: HostSession, dep: Deployment, n: int, restart: bool) -> None:
    from mur.deploy.plan import activate_steps

    svc = ServiceConfig(port=int(dep.service_port or 0), init=s.init, boot=dep.boot)
    apply_steps(s.t, activate_steps(s.lay, n, svc, s.svc.sudo, restart=restart))


def _switch(s: HostSession, dep: Deployment, ctx: Context, view: HostView, to: int) -> Deployment:
    """Rollback's switch: `current` -> release `to`, restart, check it serves; undone on failure."""
    cur = view.current
    port = int(dep.service_port or 0)
    token = read_token(dep)
    a = Attempt("mur deploy rollback", Phase.LOCKED)
    was_serving = view.serving is not None
    pin = release_pin(view.meta(to), dep.tls_pin)  # each release serves its own certificate

    def mark(d: Deployment) -> None:
        d.status, d.pending = "incomplete", {"command": "rollback", "release": to, "from": cur, "at": now_rfc3339()}

    try:
        with uninterrupted():
            old = ctx.store.get(dep.deployment_id)
            ctx.store.update(dep.deployment_id, mark)
        a.push("restore the record", lambda: _restore(ctx, old))
        a.advance(Phase.RECORDED)
        f = fronted.for_record(s.t, s.lay, dep, s.svc.sudo, token, ctx.reporter, busy=_busy(s))
        handed = False
        if f is not None and was_serving and cur is not None and f.alive():  # zero downtime, as a deploy
            a.push("stop the twin", f.stop_twin)
            with ctx.phase("twin", f"start release {to} beside release {cur}", s.t, release=to):
                f.start_twin(to, ctx.timeout)
            a.push(f"give the address back to release {cur}", lambda: f.back_to_service(cur))
            with ctx.phase("front", f"move the address to release {to}; release {cur} drains", s.t, release=to):
                f.to_twin(to, cur)
            handed = True
        if cur is not None and cur in view.releases:
            old_prev = [Symlink(f"releases/{view.previous}", s.lay.previous)] if view.previous is not None else []

            def back() -> None:
                apply_steps(s.t, old_prev)
                if was_serving:
                    _activate(s, dep, cur, restart=True)
                else:
                    apply_steps(s.t, [Symlink(f"releases/{cur}", s.lay.current)])
            a.push(f"switch back to release {cur}" + (" and restart it" if was_serving else ""), back)
        with ctx.phase("switch", f"switch to release {to}", s.t, release=to):
            if cur is not None and cur in view.releases:
                apply_steps(s.t, [Symlink(f"releases/{cur}", s.lay.previous)])  # a second rollback comes back
            _activate(s, dep, to, restart=True)
        a.advance(Phase.SWITCHED)
        with ctx.phase("start", f"wait for release {to}", s.t, release=to):
            card = s.svc.wait(port, token, pin, ctx.timeout)
            if not card.get("ok"):
                raise s.svc.failed(card, f"switched back to release {cur}" if cur is not None else "see `mur deploy logs`",
                                   f"release {to} did not start")
            after = s.observe(port)
            if after.serving is not None and after.serving != to:
                raise MurError("E-DEPLOY-004", f"release {to} started, but port {port} is served by release "
                               f"{after.serving} (pid {after.serving_pid})")
        a.advance(Phase.STARTED)
        if f is not None:
            with ctx.phase("front", f"the front serves release {to}", s.t, release=to):
                if handed:
                    f.to_service(to)
                else:
                    f.ensure(to)
    except BaseException as exc:
        undo_or_leave(ctx, s, a, exc, dep.deployment_id, "rollback",
                      f"run `mur deploy rollback {dep.deployment_id} --to {cur}` or `mur deploy status` to see what serves",
                      release=to)
        raise
    meta, prev = view.meta(to), view.meta(cur)

    def done(d: Deployment) -> None:
        d.release, d.previous = Release.from_dict(meta), Release.from_dict(prev) if prev else d.release
        cap = meta.get("capsule") or {}
        d.name, d.version = cap.get("name") or d.name, cap.get("version") or d.version
        d.tls_pin = pin
        d.status, d.pending = "running", None

    with uninterrupted():
        out = ctx.store.update(dep.deployment_id, done)
    a.forget()
    a.advance(Phase.DONE)
    return out or dep


def _busy(s: HostSession) -> set[int]:
    from mur.deploy.plan import LISTENING_COMMAND, listening_ports

    assert s.t is not None
    return listening_ports(s.t.run(LISTENING_COMMAND, check=False, what="listening ports").stdout)


def _restore(ctx: Context, old: Deployment | None) -> None:
    if old is not None:
        with uninterrupted():
            ctx.store.save(old)

