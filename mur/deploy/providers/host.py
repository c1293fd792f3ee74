"""SSH hosts and this machine: the pinned runtime, a release directory per deploy, an init system.

Deploy: connect -> runtime -> preflight (E-CAP-003 / E-DEPLOY-007) -> record `incomplete` ->
compare with the serving release (unchanged + healthy: done, nothing uploaded) -> upload the new
release -> smoke-start it on a spare port while the old one keeps serving -> switch `current`,
restart, wait for the agent card with the token -> prune old releases -> record `running`.

Any failure or interrupt after the record exists goes through `_abort`, which undoes what this
deploy did (a first deploy leaves nothing; a redeploy leaves the previous release serving); when
even that fails (the connection dropped), the record stays `incomplete` for `destroy`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable

from mur import __version__
from mur.deploy.apply import apply_steps, run_step
from mur.deploy.init import init_for
from mur.deploy.plan import (
    KEEP_RELEASES, LISTENING_COMMAND, ReleaseInputs, ReleasePlan, activate_steps, artifact_verify_command,
    choose_port, destroy_steps, listening_ports, pick_port, plan_release, prune_command,
)
from mur.deploy.preflight import Report, preflight_host
from mur.deploy.init.supervisor import stop_smoke_command
from mur.deploy.providers.base import (
    Context, DeployJob, Outcome, Service, UndoableDeploy, bundle_ref, credentials, free_local_port, new_record,
    observed_status, read_token,
)
from mur.deploy.state import Deployment, Release
from mur.deploy.steps import Layout, ServiceConfig, Symlink
from mur.deploy.targets.base import Target
from mur.errors import MurError
from mur.platform import platform_tag


def read_current(target: Target, lay: Layout) -> tuple[dict[str, Any] | None, list[int]]:
    """(release.json of `current` or None, release numbers present)."""
    q = shlex.quote
    res = target.run(f"cat {q(lay.current + '/release.json')} 2>/dev/null; echo '@@mur@@'; "
                     f"ls -1 {q(lay.releases)} 2>/dev/null; true", check=False, what="read current release")
    head, _, tail = res.stdout.partition("@@mur@@")
    try:
        current = json.loads(head) if head.strip() else None
    except ValueError:
        current = None
    return (current if isinstance(current, dict) else None), sorted(int(x) for x in tail.split() if x.isdigit())


class HostDeploy(UndoableDeploy):
    """One `mur deploy` to a connected host, with the state `_abort` needs to undo it."""

    def __init__(self, job: DeployJob, target: Target):
        self.job, self.t, self.ctx, self.r = job, target, job.ctx, job.ctx.reporter
        self.phase = "preflight"
        self.rec: Deployment | None = None
        self.current: dict[str, Any] | None = None
        self.serving = False
        self.n = 0

    def _preflight(self, refuse: bool = True) -> tuple[Any, Report]:
        """((runtime, platform), report); `refuse`: raise E-CAP-003 / E-DEPLOY-007 when it failed."""
        job, t = self.job, self.t
        plat = platform_tag(*t.uname())
        with self.r.step(f"mur {job.capsule.mur_version or __version__} runtime for {plat}"):
            runtime = self.ctx.runtime(job.req, job.capsule, plat, self.r.note)
        with self.r.step("preflight"):
            report = preflight_host(t, runtime, job.capsule, dep_id=job.dep_id, init_pref=job.req.init,
                                    no_boot_hook=job.req.no_boot_hook, progress=self.r.note)
        if refuse:
            report.raise_if_failed()
        return (runtime, plat), report

    def _address(self, port: int, bind: str, scheme: str) -> tuple[str, str | None, int | None]:
        """(url, tunnel command, local tunnel port): a loopback service over SSH needs the tunnel."""
        req, old = self.job.req, self.job.existing
        if req.target.provider != "ssh" or bind != "127.0.0.1":
            host = req.target.host if bind != "127.0.0.1" and req.target.host else "127.0.0.1"
            return f"{scheme}://{host}:{port}", None, None
        local = (old.tunnel_port if old and old.tunnel_port and old.service_port == port else None) or free_local_port()
        return f"{scheme}://127.0.0.1:{local}", self.t.tunnel_command(port, local), local  # type: ignore[attr-defined]

    def _run(self) -> Outcome:
        job, t, cap, req = self.job, self.t, self.job.capsule, self.job.req
        (runtime, plat), report = self._preflight()
        init = str(report.facts["init"])
        mode = report.facts.get("sudo")
        t.helper = mode == "helper"
        sudo = not t.is_root and (mode == "nopasswd" or (mode == "helper" and init == "systemd"))
        self.lay = lay = Layout(t.home, job.dep_id)
        self.svc_ctl = Service(t, lay, init, sudo)
        bind = "0.0.0.0" if req.publish else "127.0.0.1"
        self.current, numbers = read_current(t, lay)
        busy = listening_ports(t.run(LISTENING_COMMAND, check=False, what="listening ports").stdout)
        recorded = (job.existing.service_port if job.existing else None) or (self.current or {}).get("port")
        port = choose_port(job.dep_id, cap.internal_port, recorded, busy, t.label)
        token_file, token, tls = credentials(job, req.target.host or "127.0.0.1")
        self.token, self.pin = token, tls.pin_sha256 if tls else None
        svc = ServiceConfig(
            port=port, bind=bind, restart=cap.restart_policy, init=init, user=None if t.is_root else t.user,
            memory_bytes=cap.service_memory_bytes, tasks_max=cap.service_tasks_max, env=tuple(sorted(cap.env.items())),
            run_args=cap.run_args, keep_sessions=req.keep_sessions, boot=str(report.facts["boot"]), tls=tls is not None,
            tls_pin=tls.pin_sha256 if tls else "")
        self.n = (max(numbers) + 1) if numbers else 1
        compiled = self.ctx.precompile(req, cap, plat, self.r)
        plan = plan_release(ReleaseInputs(
            dep_id=job.dep_id, home=t.home, n=self.n, bundle=bundle_ref(runtime), manifest=cap.manifest,
            files=cap.files, workdir=cap.workdir, artifacts=cap.artifacts, service=svc, sudo=sudo,
            prev_n=int(self.current["n"]) if self.current else None, precompiled=compiled, capsule_name=cap.name,
            capsule_version=cap.version, token=token, tls=tls))
        url, tunnel, tunnel_port = self._address(port, bind, "https" if tls else "http")
        rec = new_record(job, runtime, home=t.home, init=init, port=port, bind=bind, url=url, boot=svc.boot,
                         token_file=token_file, tls=tls, sudo=sudo, helper=t.helper)
        rec.tunnel, rec.tunnel_port = tunnel, tunnel_port
        rec.uses(runtime.name, [], [str(f.rel) for f in compiled])
        # From here on the target may hold something of this deployment: the record says where.
        self.rec = self.ctx.store.save(rec)
        self.phase = "recorded"
        if self.current and self.current.get("digest") == plan.digest:
            return self._unchanged(rec, port)

        self.phase = "upload"
        with self.r.step(f"upload release {self.n}"):
            stats = apply_steps(t, plan.prepare, job.dep_id, self.r.note)
            verify = artifact_verify_command(lay, cap.artifacts)
            if verify and t.run(verify, check=False, what="verify artifacts").rc != 0:
                raise MurError("E-REG-002", f"artifact digest mismatch on {t.label} after upload")
        self.serving = bool(self.current) and self.svc_ctl.state().ready
        if self.serving:
            self.phase = "smoke"
            with self.r.step(f"smoke-start release {self.n} beside release {self.current['n']}"):  # type: ignore[index]
                self._smoke(plan, port, busy)
        self.phase = "switch"
        old = job.existing
        if old and old.init != init and old.release is not None:  # the service moves to another init system
            other = init_for(old.init)
            apply_steps(t, [*other.stop(lay, sudo), *other.remove(lay, sudo)])
        with self.r.step(f"start release {self.n} ({init})"):
            apply_steps(t, plan.activate)
            card = self.svc_ctl.wait(port, token, self.pin, req.start_timeout)
            if not card.get("ok"):
                raise self.svc_ctl.failed(card, f"switched back: release {self.current['n']} serves again"
                                          if self.serving else "nothing of this deploy is left on the target")
        keep = [self.n] + ([int(self.current["n"])] if self.current else []) + numbers[::-1][: KEEP_RELEASES - 2]
        t.run(prune_command(lay, keep), check=False, what="prune old releases")
        if self.current:
            rec.previous = Release.from_dict(self.current)
        rec.release, rec.status = Release.from_dict(plan.release_meta), "running"
        self.phase = "done"
        self.ctx.store.save(rec)
        return Outcome(rec, unchanged=False, uploaded=stats.uploaded, uploaded_bytes=stats.uploaded_bytes,
                       agent_card=card.get("agent_card"))

    def _unchanged(self, rec: Deployment, port: int) -> Outcome:
        card = self.svc_ctl.answers(port, self.token, self.pin)
        if not card.get("ok"):
            self.phase = "start-unchanged"
            with self.r.step(f"start release {self.current['n']} (unchanged)"):  # type: ignore[index]
                init = init_for(rec.init)
                apply_steps(self.t, init.start(self.lay, self.svc_ctl.sudo))
                card = self.svc_ctl.wait(port, self.token, self.pin, self.job.req.start_timeout)
            if not card.get("ok"):
                raise self.svc_ctl.failed(card, "the service is stopped; fix the capsule and deploy again")
        rec.release = rec.release or Release.from_dict(self.current)
        rec.status, self.phase = "running", "done"
        self.ctx.store.save(rec)
        return Outcome(rec, unchanged=True, uploaded=0, uploaded_bytes=0, agent_card=card.get("agent_card"))

    def _smoke(self, plan: ReleasePlan, port: int, busy: set[int]) -> None:
        q = shlex.quote
        spare = pick_port(self.job.dep_id, busy | {port}, salt=1)
        rel, timeout = plan.release_dir, self.job.req.start_timeout
        res = self.t.run(f"{q(rel + '/mur')} supervise smoke --spec {q(rel + '/service.json')} --release-dir {q(rel)} "
                         f"--port {spare} --timeout {int(timeout)}", check=False, timeout=timeout + 60, what="smoke start")
        try:
            out = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out = {"ok": False, "error": (res.stderr or res.stdout).strip()[-800:]}
        if not out.get("ok"):
            raise MurError("E-DEPLOY-004", f"the new release did not start on {self.t.label}: {out.get('error')}\n"
                           f"remote stderr:\n{(out.get('stderr') or '').strip()[-1500:]}",
                           "the previous release keeps serving; fix the capsule and deploy again")

    def _abort(self, exc: BaseException) -> None:
        """Undo this deploy: a first deploy leaves nothing, a redeploy the previous release serving."""
        if self.rec is None or self.phase == "done":
            return  # nothing of the deployment was written (preflight refused, or interrupted before)
        job, t, lay = self.job, self.t, self.lay
        if hasattr(t, "connect_budget"):  # after a dropped connection: one short reconnect attempt
            t.connect_budget = min(t.connect_budget, 5.0)
        old = job.existing
        interrupted = not isinstance(exc, MurError)
        sudo = self.svc_ctl.sudo
        init = init_for(self.rec.init)
        try:
            with self.r.step("interrupted: undoing this deploy" if interrupted else "undoing this deploy"):
                if old is None or old.release is None:
                    apply_steps(t, destroy_steps(lay, self.rec.init, sudo, self.rec.bundles,
                                                 [tuple(a) for a in self.rec.artifacts], self.rec.precompiled,  # type: ignore[misc]
                                                 keep_bundles=self.rec.provider == "local"))
                    self.ctx.store.remove(job.dep_id)
                    from mur.deploy import auth

                    auth.forget(job.dep_id)
                    return
                status = old.status
                if self.phase in ("upload", "smoke", "switch"):
                    t.run(stop_smoke_command(lay), sudo=sudo, check=False, what="stop the smoke start")
                if self.phase == "switch" and self.current:
                    prev = int(self.current["n"])
                    if old.init != self.rec.init:  # the new release came up under another init system
                        apply_steps(t, [*init.stop(lay, sudo), *init.remove(lay, sudo)])
                    if self.serving:
                        svc = ServiceConfig(port=int(old.service_port or 0), init=old.init, boot=old.boot)
                        apply_steps(t, activate_steps(lay, prev, svc, sudo))
                        card = Service(t, lay, old.init, sudo).wait(int(old.service_port or 0), self.token, self.pin, 60)
                        status = "running" if card.get("ok") else "failed"
                    else:
                        apply_steps(t, [*init.stop(lay, sudo), Symlink(f"releases/{prev}", lay.current)])
                elif self.phase == "start-unchanged":
                    apply_steps(t, init.stop(lay, sudo))
                    status = "failed"
                if self.phase in ("upload", "smoke", "switch") and self.n:
                    t.run(f"rm -rf {shlex.quote(lay.release(self.n))}", sudo=sudo, check=False,
                          what="remove the new release")
                old.status = status
                self.ctx.store.save(old)
        except BaseException:  # noqa: BLE001 - the connection dropped, a second Ctrl-C: keep the record
            self.r.note(f"could not undo everything: {job.dep_id} stays recorded as incomplete; "
                        f"`mur deploy destroy {job.dep_id}` removes it")


class HostProvider:
    """`ssh` (an existing machine over SSH) and `local` (this machine)."""

    def __init__(self, kind: str):
        self.kind = kind

    def _open(self, dep: Deployment, ctx: Context) -> tuple[Target, Layout, Service]:
        target = ctx.connect(dep.target, note=ctx.reporter.note)
        lay = Layout(dep.home or target.home, dep.deployment_id)
        target.helper = dep.helper
        return target, lay, Service(target, lay, dep.init, dep.sudo and not target.is_root)

    def check(self, job: DeployJob) -> Report:
        with job.ctx.open(job.req.target, job.req.trust_new_host) as target:
            return HostDeploy(job, target)._preflight(refuse=False)[1]

    def deploy(self, job: DeployJob) -> Outcome:
        with job.ctx.open(job.req.target, job.req.trust_new_host) as target:
            return HostDeploy(job, target).run()

    def status(self, dep: Deployment, ctx: Context) -> dict[str, Any]:
        target, lay, svc = self._open(dep, ctx)
        with target:
            state = svc.state()
            card = svc.answers(int(dep.service_port or 0), read_token(dep), dep.tls_pin) if state.running else \
                {"ok": False, "error": "service not running"}
        dep.status = observed_status(dep, state.running, bool(card.get("ok")))
        ctx.store.save(dep)
        return {"service": state.to_dict(), "agent_card_ok": bool(card.get("ok")), "agent_card": card.get("agent_card"),
                "error": None if card.get("ok") else card.get("error")}

    def logs(self, dep: Deployment, lines: int, follow: bool, sink: Callable[[bytes], None] | None,
             ctx: Context) -> str:
        target, lay, svc = self._open(dep, ctx)
        with target:
            step = svc.init.logs(lay, lines, follow, svc.sudo)
            if follow and sink is not None:
                target.stream(target.elevated(step.cmd, step.helper) if step.sudo else step.cmd, sink)
                return ""
            res = run_step(target, step)
            return res.stdout + (res.stderr if res.rc else "")

    def start(self, dep: Deployment, ctx: Context) -> Deployment:
        target, lay, svc = self._open(dep, ctx)
        with target:
            with ctx.reporter.step("start"):
                apply_steps(target, svc.init.start(lay, svc.sudo))
                card = svc.wait(int(dep.service_port or 0), read_token(dep), dep.tls_pin, ctx.timeout)
            if not card.get("ok"):
                raise svc.failed(card, "see `mur deploy logs`")
        dep.status = "running"
        return ctx.store.save(dep)

    def stop(self, dep: Deployment, ctx: Context) -> Deployment:
        target, lay, svc = self._open(dep, ctx)
        with target:
            with ctx.reporter.step(f"stop {dep.deployment_id}"):
                apply_steps(target, svc.init.stop(lay, svc.sudo))
        dep.status = "stopped"
        return ctx.store.save(dep)

    def destroy(self, dep: Deployment, ctx: Context) -> None:
        target, lay, svc = self._open(dep, ctx)
        with target:
            with ctx.reporter.step(f"destroy {dep.deployment_id}"):
                apply_steps(target, destroy_steps(lay, dep.init, svc.sudo, list(dep.bundles),
                                                  [tuple(a) for a in dep.artifacts], list(dep.precompiled),  # type: ignore[misc]
                                                  keep_bundles=self.kind == "local"))
                if target.exists(lay.root):
                    raise MurError("E-DEPLOY-003", f"{lay.root} is still present on {target.label} after destroy")

    def rollback(self, dep: Deployment, ctx: Context) -> Deployment:
        prev = dep.previous
        if prev is None or prev.n is None:
            raise MurError("E-DEPLOY-011", f"deployment {dep.deployment_id} has no previous release to roll back to",
                           "rollback needs at least two successful deploys")
        target, lay, svc = self._open(dep, ctx)
        with target:
            current, numbers = read_current(target, lay)
            if prev.n not in numbers:
                raise MurError("E-DEPLOY-011", f"release {prev.n} is no longer on the target (pruned)")
            config = ServiceConfig(port=int(dep.service_port or 0), init=dep.init, boot=dep.boot)
            with ctx.reporter.step(f"switch to release {prev.n}"):
                apply_steps(target, activate_steps(lay, prev.n, config, svc.sudo))
                card = svc.wait(int(dep.service_port or 0), read_token(dep), dep.tls_pin, ctx.timeout)
            if not card.get("ok"):
                err = svc.failed(card, f"switched back to release {current['n'] if current else '?'}",
                                 f"release {prev.n} did not start")
                if current:
                    apply_steps(target, activate_steps(lay, int(current["n"]), config, svc.sudo))
                raise err
        dep.release, dep.previous, dep.status = prev, dep.release, "running"
        return ctx.store.save(dep)
