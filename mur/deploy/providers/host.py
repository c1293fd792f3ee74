"""SSH hosts and this machine: the pinned runtime, a release directory per deploy, an init system.

Deploy, as steps that each push their undo the moment they succeeded (mur.deploy.undo):

    connect -> runtime + precompile (here) -> lock (on the target, with the host's shared lock)
    -> preflight (E-CAP-003 / E-DEPLOY-007 / E-DEPLOY-014)      undo: collect what it left unused
    -> sweep leftovers, observe what is true (mur.deploy.observe)
    -> record `incomplete` + pending                            undo: restore the record (or forget it,
                                                                      and remove everything: a first deploy)
    -> same digest as `current`: done if it serves and answers (unchanged), else repair (restart
       what `current` names; if that fails, switch back to what served)
    -> stage the release, release.json last, fsync, commit      undo: remove it
    -> smoke-start it on a spare port (when something serves)   undo: stop the smoke start
    -> switch `current`, restart from it, wait, check that the  undo: switch back, restart what served
       process on the port runs the new release
    -> prune (complete releases only) -> record `running`

A failure or Ctrl-C runs the undo within MUR_DEPLOY_UNDO_BUDGET seconds, on a fresh connection
holding the lock again when the old one is dead; what cannot be undone stays in the record
(`incomplete`, with what is left), which the next deploy repairs.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import shlex
from typing import Any

from mur import __version__
from mur.deploy import auth, fronted
from mur.deploy.apply import ApplyStats, apply_steps, run_step
from mur.deploy.cleanup import collect_step, destroy_steps, gc_shared_command, prune_command, sweep_command
from mur.deploy.init import init_for
from mur.deploy.init.supervisor import stop_smoke_command
from mur.deploy.observe import HostView
from mur.deploy.plan import (
    KEEP_RELEASES, LISTENING_COMMAND, ReleaseInputs, ReleasePlan, activate_steps, artifact_verify_command,
    choose_port, listening_ports, pick_port, plan_release,
)
from mur.deploy.preflight import Report, preflight_host
from mur.deploy.providers.base import (
    DeployJob, Outcome, bundle_ref, credentials, forget_reservation, free_local_port, new_record, undo_or_leave,
)
from mur.deploy.providers.hostsession import HostSession, follow_truth, release_pin
from mur.deploy.state import Deployment, Release, now_rfc3339, uninterrupted
from mur.deploy.steps import Run, ServiceConfig, Symlink
from mur.deploy.targets.base import full_line, quoted
from mur.deploy.undo import Attempt, Phase
from mur.errors import MurError
from mur.platform import platform_tag

REPAIR = "run `mur deploy` again (it sweeps what was left and repairs the rest), or `mur deploy destroy {id}`"


class HostDeploy:
    """One `mur deploy` to a host (see the module docstring)."""

    def __init__(self, job: DeployJob):
        self.job, self.ctx, self.r = job, job.ctx, job.ctx.reporter
        self.a = Attempt("mur deploy")
        self.s = HostSession(self.ctx, job.req.target, job.dep_id, command=f"mur deploy {job.dep_id}",
                             trust_new_host=job.req.trust_new_host)
        self.rec: Deployment | None = None
        self.n = 0
        self.nonce = secrets.token_hex(4)
        self.first = True
        self.before: HostView | None = None
        self.was_serving = False
        self.old_init = ""
        self.ports: fronted.Ports | None = None
        self.front: fronted.Fronted | None = None
        self.handed_over = False
        self.reuse: int | None = None  # a complete release on the target that is this release

    # the attempt --------------------------------------------------------------------------------

    def run(self) -> Outcome:
        try:
            self.s.open()
            return self._run()
        except BaseException as exc:
            self._fail(exc)
            raise
        finally:
            self.s.close()

    def check(self) -> Report:
        """`--check`: the preflight report only (leaves nothing of a deployment that does not exist)."""
        try:
            self.s.open()
            runtime, _compiled = self._local_inputs(precompile=False)
            self.s.take_lock(shared=True)
            report = self._run_preflight(runtime)
            self._tidy_check()
            return report
        finally:
            self.s.close()

    def _local_inputs(self, precompile: bool = True) -> tuple[Any, tuple]:
        job, t, cap = self.job, self.s.t, self.job.capsule
        assert t is not None
        self.plat = plat = platform_tag(*t.uname())
        with self.ctx.phase("runtime", f"mur {cap.mur_version or __version__} runtime for {plat}"):
            runtime = self.ctx.runtime(job.req, cap, plat, self.r.note)
        compiled = self.ctx.precompile(job.req, cap, plat, self.r) if precompile else ()
        return runtime, compiled

    def _run_preflight(self, runtime: Any) -> Report:
        job, t = self.job, self.s.t
        with self.ctx.phase("preflight", "preflight", t):
            return preflight_host(t, runtime, job.capsule, dep_id=job.dep_id, init_pref=job.req.init,
                                  no_boot_hook=job.req.no_boot_hook, progress=self.r.note,
                                  scratch=self.s.lay.scratch(self.nonce))

    def _tidy_check(self) -> None:
        t, lay = self.s.t, self.s.lay
        q = shlex.quote
        gone = t.run(f"rm -rf {q(lay.scratch(self.nonce))}; rmdir {q(lay.staging)} {q(lay.murmur + '/staging')} "
                     f"2>/dev/null; test -e {q(lay.root)}", check=False, what="tidy the check").rc != 0
        if gone and self.s.lock is not None:
            self.s.lock.remove_files()

    def _run(self) -> Outcome:
        job, req, cap, ctx, s, a = self.job, self.job.req, self.job.capsule, self.ctx, self.s, self.a
        t = s.t
        assert t is not None
        runtime, compiled = self._local_inputs()
        s.take_lock(shared=True)
        a.advance(Phase.LOCKED)
        a.push("remove this deploy's staging and collect the shared files it left unused", self._tidy)
        swept = [ln[8:] for ln in t.run(sweep_command(s.lay), check=False, what="sweep leftovers").stdout.splitlines()
                 if ln.startswith("@@swept ")]
        for what in swept:
            self.r.note(f"removed what an interrupted command left: {what}")

        a.at(Phase.LOCKED)
        report = self._run_preflight(runtime)
        report.raise_if_failed()
        init = str(report.facts["init"])
        mode = report.facts.get("sudo")
        sudo = not t.is_root and (mode == "nopasswd" or (mode == "helper" and init == "systemd"))
        s.configure(init, sudo, mode == "helper")
        a.advance(Phase.CHECKED)
        lay = s.lay

        with ctx.phase("observe", "read the deployment on the target", t):
            recorded = job.existing.service_port if job.existing else None
            view = s.observe(recorded)
            if not recorded and view.meta(view.current).get("port"):
                recorded = int(view.meta(view.current)["port"])
                view = s.observe(recorded)
            self.before, self.first = view, not view.releases
            busy = listening_ports(t.run(LISTENING_COMMAND, check=False, what="listening ports").stdout)
        # with a front (mur.deploy.fronted), the URL is the front's port and the service's is private
        self.ports = fronted.ports_for(job.dep_id, cap.internal_port, job.existing, req.front, recorded, busy, t.label)
        port = self.ports.service if self.ports else choose_port(job.dep_id, cap.internal_port, recorded, busy, t.label)
        token_file, token, tls = credentials(job, req.target.host or "127.0.0.1")
        self.token, self.pin, self.port = token, (tls.pin_sha256 if tls else None), port
        bind = "0.0.0.0" if req.publish and not self.ports else "127.0.0.1"
        svc = ServiceConfig(
            port=port, bind=bind, restart=cap.restart_policy, init=init, user=None if t.is_root else t.user,
            memory_bytes=cap.service_memory_bytes, tasks_max=cap.service_tasks_max, env=tuple(sorted(cap.env.items())),
            run_args=cap.run_args, keep_sessions=req.keep_sessions, boot=str(report.facts["boot"]), tls=tls is not None,
            tls_pin=tls.pin_sha256 if tls else "")
        inputs = ReleaseInputs(
            dep_id=job.dep_id, home=lay.home, n=max(view.numbers, default=0) + 1, bundle=bundle_ref(runtime),
            manifest=cap.manifest, files=cap.files, workdir=cap.workdir, artifacts=cap.artifacts, service=svc,
            sudo=sudo, prev_n=view.current if view.current in view.releases else None, precompiled=compiled,
            capsule_name=cap.name, capsule_version=cap.version, token=token, tls=tls, nonce=self.nonce)
        plan = plan_release(inputs)
        # this very release is already complete on the target (an interrupted deploy committed it and
        # never switched to it): it is switched to as it is, not copied again under a new number
        same = [m for m, meta in view.releases.items() if meta.get("digest") == plan.digest and m != view.current]
        self.reuse = max(same) if same else None
        if self.reuse is not None:
            plan = plan_release(dataclasses.replace(inputs, n=self.reuse))
        self.n = plan.release_meta["n"]
        if self.ports:
            url, tunnel, tunnel_port = self._address(self.ports.front, "0.0.0.0" if req.publish else "127.0.0.1",
                                                     "https" if tls else "http")
        else:
            url, tunnel, tunnel_port = self._address(port, bind, "https" if tls else "http")
        rec = new_record(job, runtime, home=lay.home, init=init, port=port, bind=bind, url=url, boot=svc.boot,
                         token_file=token_file, tls=tls, sudo=sudo, helper=s.helper)
        rec.tunnel, rec.tunnel_port = tunnel, tunnel_port
        if self.ports:
            rec.extra["front"] = {"port": self.ports.front, "bind": "0.0.0.0" if req.publish else "127.0.0.1"}
            self.front = fronted.Fronted(t, lay, self.ports, sudo=sudo, token=token, pin=self.pin, publish=req.publish,
                                         gate=ctx.gate, reporter=self.r)
        elif req.front and job.existing is not None:
            self.r.note("this deployment was made without a front: its releases restart in place "
                        "(a front is chosen at a deployment's first deploy)")
        rec.uses(runtime.name, [], [str(f.rel) for f in compiled])
        self._record(rec)

        current = view.meta(view.current)
        if view.current is not None and current.get("digest") == plan.digest:
            return self._same(rec, view)
        return self._new(rec, plan, busy)

    # steps ------------------------------------------------------------------------------------

    def _record(self, rec: Deployment) -> None:
        """RECORDED: the record says a deploy is under way (and what it will be)."""
        self.a.at(Phase.CHECKED)
        old = self.ctx.store.get(self.job.dep_id)
        rec.pending = {"command": "deploy", "release": None, "at": now_rfc3339(), "phase": "recorded"}
        with uninterrupted():
            self.rec = self.ctx.store.save(rec)
        if self.first:
            self.a.push("remove everything of the deployment from the target", self._remove_all)
        else:
            self.a.push("restore the record", lambda: self._restore(old))
        self.a.advance(Phase.RECORDED)

    def _same(self, rec: Deployment, view: HostView) -> Outcome:
        """The release `current` names is this one: unchanged when it serves and answers; else repair."""
        s, t = self.s, self.s.t
        assert t is not None and view.current is not None
        st = s.state()
        card = s.health(self.port, self.token, self.pin) if view.serving == view.current else {"ok": False}
        if view.serving == view.current and card.get("ok") and st.running and not st.looping:
            return self._finish(rec, view.current, previous=rec.previous, card=card, unchanged=True)
        if view.serving is not None and view.serving != view.current:
            what = f"release {view.serving} was serving while current names release {view.current}"
        elif view.serving is None:
            what = f"release {view.current} was not serving ({st.state})"
        else:
            what = f"release {view.current} did not answer ({card.get('error') or st.state})"
        self.r.note(f"repair: {what}")
        if view.serving is not None and view.serving != view.current and view.serving in view.releases:
            back = view.serving
            self.a.push(f"switch back to release {back}, which was serving", lambda: self._back_to(back))
        with self.ctx.phase("start", f"restart release {view.current} (repair)", t, release=view.current):
            self._start_and_verify(view.current, "the previous state was restored where possible")
        return self._finish(rec, view.current, previous=rec.previous, card=self.card, unchanged=False, repaired=what)

    def _new(self, rec: Deployment, plan: ReleasePlan, busy: set[int]) -> Outcome:
        job, s, t, a, ctx = self.job, self.s, self.s.t, self.a, self.ctx
        assert t is not None and self.before is not None
        lay, n = s.lay, self.n
        a.at(Phase.RECORDED)
        with uninterrupted():
            ctx.store.update(job.dep_id, lambda d: d.pending and d.pending.update(release=n, phase="staging"))
        if self.reuse is None:
            a.push(f"remove the new release {n}", self._remove_new)
            with ctx.phase("stage", f"upload release {n}", t, release=n):
                stats = apply_steps(t, plan.prepare, job.dep_id, self.r.note)
                verify = artifact_verify_command(lay, job.capsule.artifacts)
                if verify and t.run(verify, check=False, what="verify artifacts").rc != 0:
                    raise MurError("E-REG-002", f"artifact digest mismatch on {t.label} after upload")
            with ctx.phase("commit", f"commit release {n}", t, release=n):
                run_step(t, plan.commit)
        else:
            self.r.note(f"release {n} is this release, complete on the target: switching to it")
            stats = ApplyStats()
        a.advance(Phase.STAGED)

        before = self.before
        self.was_serving = before.serving is not None and bool(
            s.health(self.port, self.token, self._pin_of(before.serving)).get("ok"))
        # a start stages the capsule's tools (about the capsule's size): what a full disk is said to need
        t.need_bytes = job.capsule.upload_bytes
        if self.was_serving and self.front is not None and before.serving in before.releases:
            self._hand_over(n, before.serving)  # zero downtime: a twin of release n takes the address
        elif self.was_serving:
            a.push("stop the smoke start", lambda: t.run(stop_smoke_command(lay), check=False, what="stop the smoke start"))
            with ctx.phase("smoke", f"smoke-start release {n} beside release {before.serving}", t, release=n):
                self._smoke(plan, busy)
            a.advance(Phase.SMOKED)

        old = job.existing
        self.old_init = old.init if old and old.release is not None else s.init
        if not self.first:
            back = before.serving if before.serving in before.releases else before.current
            if back is not None:
                a.push(f"switch back to release {back} and restart it" if self.was_serving else
                       f"switch back to release {back}", lambda: self._switch_back(back))
        with uninterrupted():
            ctx.store.update(job.dep_id, lambda d: d.pending and d.pending.update(phase="switching"))
        with ctx.phase("start", f"start release {n} ({s.init})", t, release=n):
            if self.old_init != s.init:  # the service moves to another init system
                other = init_for(self.old_init)
                apply_steps(t, [*other.stop(lay, s.sudo), *other.remove(lay, s.sudo)])
            served = before.serving if before.serving in before.releases else before.current
            # `previous` first: whatever happens next, rollback knows what served before
            if served not in (None, n):
                apply_steps(t, [Symlink(f"releases/{served}", lay.previous)])
            # then `current` and the restart, sent as one command (InitSystem.start)
            self._start_and_verify(n, f"switched back: release {before.serving} serves again" if self.was_serving
                                   else ("nothing of this deploy is left on the target" if self.first else
                                         f"current names release {before.current} again"))
        a.advance(Phase.STARTED)
        if self.handed_over:
            with ctx.phase("front", f"give the address back to the service (release {n})", t, release=n):
                self.front.to_service(n)  # type: ignore[union-attr]

        keep = [n] + ([before.current] if before.current is not None else []) + before.older_complete(None)[: KEEP_RELEASES - 2]
        t.run(prune_command(lay, keep), check=False, what="prune old releases")
        prev_n = before.serving if before.serving in before.releases else before.current
        previous = Release.from_dict(before.meta(prev_n)) if prev_n is not None else None
        out = self._finish(rec, n, previous=previous, card=self.card, unchanged=False, meta=plan.release_meta)
        out.uploaded, out.uploaded_bytes = stats.uploaded, stats.uploaded_bytes
        return out

    def _hand_over(self, n: int, serving: int) -> None:
        """Release n starts beside release `serving` (the twin), passes the gate, takes the address;
        the service drains (mur.deploy.fronted). Each step pushes its undo."""
        f, a, t = self.front, self.a, self.s.t
        assert f is not None
        f.repair(serving)
        a.push("stop the twin", f.stop_twin)
        with self.ctx.phase("twin", f"start release {n} beside release {serving}", t, release=n):
            f.start_twin(n, self.job.req.start_timeout)
        a.push(f"give the address back to release {serving}", lambda: f.back_to_service(serving))
        with self.ctx.phase("front", f"move the address to release {n}; release {serving} drains", t, release=n):
            f.to_twin(n, serving)
        self.handed_over = True
        a.advance(Phase.SMOKED)

    def _start_and_verify(self, n: int, after: str) -> None:
        """Restart the service from `current` (= n), wait until it answers, and check that the process
        on the port runs release n (not a leftover of another release)."""
        s, t = self.s, self.s.t
        assert t is not None
        self._activate(n, restart=True)
        self.a.advance(Phase.SWITCHED)
        card = s.svc.wait(self.port, self.token, self.pin, self.job.req.start_timeout)
        if not card.get("ok"):
            raise s.svc.failed(card, after)
        view = s.observe(self.port)
        if view.serving is not None and view.serving != n:
            raise MurError("E-DEPLOY-004", f"release {n} started on {t.label}, but port {self.port} is served by "
                           f"release {view.serving} (pid {view.serving_pid})", after)
        self.card = card

    def _activate(self, n: int, restart: bool) -> None:
        """`current` -> release n, (re)start the service from it, keep it across reboots."""
        s = self.s
        svc = ServiceConfig(port=self.port, init=s.init, boot=self.rec.boot if self.rec else "none")
        apply_steps(s.t, activate_steps(s.lay, n, svc, s.sudo, restart=restart))

    def _smoke(self, plan: ReleasePlan, busy: set[int]) -> None:
        t = self.s.t
        assert t is not None
        q = shlex.quote
        spare = pick_port(self.job.dep_id, busy | {self.port}, salt=1)
        rel, timeout = plan.release_dir, self.job.req.start_timeout
        res = t.run(f"{q(rel + '/mur')} supervise smoke --spec {q(rel + '/service.json')} --release-dir {q(rel)} "
                    f"--port {spare} --timeout {int(timeout)}", check=False, timeout=timeout + 60, what="smoke start")
        try:
            out = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out = {"ok": False, "error": (res.stderr or res.stdout).strip()[-800:]}
        if not out.get("ok"):
            stderr = (out.get("stderr") or "").strip()[-1500:]
            full = full_line(stderr)
            if full is not None:
                raise t.disk_full("smoke-start the new release", detail=full)
            raise MurError("E-DEPLOY-004", f"the new release did not start on {t.label}: {out.get('error')}\n"
                           f"remote stderr:\n{quoted(stderr)}",
                           "the previous release keeps serving; fix the capsule and deploy again")

    def _finish(self, rec: Deployment, n: int, *, previous: Release | None, card: dict[str, Any], unchanged: bool,
                repaired: str | None = None, meta: dict[str, Any] | None = None) -> Outcome:
        before = self.before
        meta = meta or (before.meta(n) if before else {})
        rec.release, rec.previous = Release.from_dict(meta), previous
        rec.tls_pin = release_pin(meta, rec.tls_pin)
        cap = meta.get("capsule") or {}
        rec.name, rec.version = cap.get("name") or rec.name, cap.get("version") or rec.version
        rec.status, rec.pending = "running", None
        t, lay = self.s.t, self.s.lay
        q = shlex.quote
        t.run(f"rm -rf {q(lay.scratch(self.nonce))}; rmdir {q(lay.staging)} {q(lay.murmur + '/staging')} 2>/dev/null; true",
              check=False, what="remove this deploy's staging")
        if self.front is not None:  # the front serves release n (started, or replaced by a newer runtime)
            with self.ctx.phase("front", f"front on port {self.front.ports.front}", t, release=n):
                self.front.ensure(n)
                fronted.install_boot(t, lay, self.s.sudo, rec.boot)
        self._collect()
        with uninterrupted():
            self.ctx.store.save(rec)
        self.a.forget()
        self.a.advance(Phase.DONE)
        return Outcome(rec, unchanged=unchanged, uploaded=0 if unchanged else None, uploaded_bytes=0 if unchanged else None,
                       agent_card=card.get("agent_card"), repaired=repaired)

    def _address(self, port: int, bind: str, scheme: str) -> tuple[str, str | None, int | None]:
        """(url, tunnel command, local tunnel port): a loopback service over SSH needs the tunnel."""
        req, old = self.job.req, self.job.existing
        if req.target.provider != "ssh" or bind != "127.0.0.1":
            host = req.target.host if bind != "127.0.0.1" and req.target.host else "127.0.0.1"
            return f"{scheme}://{host}:{port}", None, None
        was = (fronted.recorded(old) or {}).get("port") if self.ports else (old.service_port if old else None)
        local = (old.tunnel_port if old and old.tunnel_port and was == port else None) or free_local_port()
        return f"{scheme}://127.0.0.1:{local}", self.s.t.tunnel_command(port, local), local  # type: ignore[union-attr]

    def _collect(self) -> None:
        """What interrupted commands of any deployment left in the shared places (partial runtime
        copies, payload caches of sessions that are gone, files nobody references) goes now too;
        skipped, never waited for, while another deploy on the host holds the shared lock."""
        s, t = self.s, self.s.t
        if s.lock is None or t is None or not s.lock.drop_shared():
            return
        out = t.run(gc_shared_command(s.lay, keep_bundles=self.job.req.target.provider == "local"), check=False,
                    what="collect unused shared files").stdout
        for line in out.splitlines():
            if line.startswith("@@gc "):
                self.r.note(f"removed {line[5:]} (unused)")

    # undo steps -------------------------------------------------------------------------------

    def _tidy(self) -> None:
        """This deploy's staging goes; shared files nobody references go (a runtime uploaded for
        nothing); a deployment that does not exist on the target leaves no lock files either."""
        s, t = self.s, self.s.t
        assert t is not None and s.lock is not None
        q = shlex.quote
        lay = s.lay
        t.run(f"rm -rf {q(lay.scratch(self.nonce))} {q(lay.stage(self.n, self.nonce))}; "
              f"rmdir {q(lay.staging)} 2>/dev/null; true", check=False, what="remove this deploy's staging")
        s.lock.drop_shared()
        if not t.exists(lay.root) and not t.exists(lay.staging):
            s.lock.remove_files()  # (still held: a waiting command takes a fresh lock file)
            forget_reservation(self.job)
        t.run(gc_shared_command(lay, keep_bundles=self.job.req.target.provider == "local"), check=False,
              what="collect unused shared files")

    def _remove_all(self) -> None:
        """A first deploy: the target had nothing of this deployment, and has nothing again."""
        s, t = self.s, self.s.t
        assert t is not None and s.lock is not None
        s.lock.drop_shared()
        local = self.job.req.target.provider == "local"
        apply_steps(t, destroy_steps(s.lay, s.init, s.sudo, keep_bundles=local))
        if t.exists(s.lay.root):
            raise MurError("E-DEPLOY-003", f"{s.lay.root} is still present on {t.label}")
        s.lock.remove_files()
        run_step(t, collect_step(s.lay, keep_bundles=local))
        with uninterrupted():
            self.ctx.store.remove(self.job.dep_id)
        auth.forget(self.job.dep_id)

    def _remove_new(self) -> None:
        """The new release, staged or committed, unless `current` names it (the switch back comes first)."""
        t, lay = self.s.t, self.s.lay
        assert t is not None
        q = shlex.quote
        rel = lay.release(self.n)
        mark = q('"nonce": "' + self.nonce + '"')
        # a smoke start a cut link left running may still write into it: stop it, remove, and make
        # sure it is gone (an undo that says done leaves no half release)
        t.run(f"rm -rf {q(lay.stage(self.n, self.nonce))}; "
              f"if grep -qF {mark} {q(rel + '/release.json')} 2>/dev/null "
              f"&& [ \"$(readlink {q(lay.current)})\" != releases/{self.n} ]; then "
              f"for i in 1 2 3 4 5; do {stop_smoke_command(lay)}; rm -rf {q(rel)}; [ -e {q(rel)} ] || break; sleep 0.3; "
              f"done; ! [ -e {q(rel)} ]; fi", sudo=self.s.sudo, what="remove the new release")

    def _back_to(self, back: int) -> None:
        self._activate(back, restart=True)
        if self.a.remaining() > 2:
            self.s.svc.wait(self.port, self.token, self._pin_of(back), self.a.remaining() - 1)

    def _switch_back(self, back: int) -> None:
        s, t, lay = self.s, self.s.t, self.s.lay
        assert t is not None
        new, old = init_for(s.init), init_for(self.old_init or s.init)
        steps: list = []
        if self.old_init and self.old_init != s.init:  # the new release came up under another init system
            steps += [*new.stop(lay, s.sudo), *new.remove(lay, s.sudo)]
        before = self.before
        if before is not None and before.previous is not None:
            steps.append(Symlink(f"releases/{before.previous}", lay.previous))
        else:
            steps.append(Run(f"rm -f {shlex.quote(lay.previous)}", check=False, label="forget previous"))
        if self.was_serving:
            steps += old.start(lay, s.sudo, restart=True, switch=f"releases/{back}")
        else:
            steps += [Symlink(f"releases/{back}", lay.current), *new.stop(lay, s.sudo)]
        apply_steps(t, steps)
        if self.was_serving and self.a.remaining() > 2:
            # it served before this deploy: give it the rest of the budget to answer again, so the
            # command ends with it serving (or the record says it is still starting)
            s.svc.wait(self.port, self.token, self._pin_of(back), self.a.remaining() - 1)

    def _pin_of(self, n: int | None) -> str | None:
        before = self.before
        fallback = self.job.existing.tls_pin if self.job.existing else None
        return release_pin(before.meta(n), fallback) if before is not None else fallback

    def _restore(self, old: Deployment | None) -> None:
        if old is None:
            return
        with uninterrupted():
            self.ctx.store.save(old)

    def _fail(self, exc: BaseException) -> None:
        """Undo what this attempt did, within the undo budget; what is left goes into the record."""
        if self.a.phase is Phase.DONE:
            return
        if not self.a.pending():
            forget_reservation(self.job)  # nothing reached the target
            return
        left = undo_or_leave(self.ctx, self.s, self.a, exc, self.job.dep_id, "deploy",
                             REPAIR.format(id=self.job.dep_id), fallback=self.rec, release=self.n or None)
        if not left and not self.first:
            self._settle()

    def _settle(self) -> None:
        """After a full undo the record is the old one: give it the state the target is in now (a
        repair that failed leaves a crash-looping or stopped service, never a `running` record)."""
        from mur.deploy.providers.base import read_token

        dep = self.ctx.store.get(self.job.dep_id)
        t = self.s.t
        if dep is None or t is None or not t.alive(2.0):
            return
        try:
            truth, view, _st, _card = self.s.truth(dep, read_token(dep), own=True)
        except MurError:
            return
        with uninterrupted():
            self.ctx.store.update(self.job.dep_id, follow_truth(dep, truth, view))
