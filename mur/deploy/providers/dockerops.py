"""The commands on a Docker engine: deploy (each step beside its undo), status derived from the
serving container, start, stop, rollback, destroy, gc.

The deployment's lock is held on the engine's machine (this one: the engine is local or reached
through DOCKER_HOST) for the whole command: `~/.murmur/locks/docker-<dep_id>.lock`, held by a
child process that lives exactly as long as the command (mur.deploy.lock). Before it changes
anything a command puts the containers back in order after an interrupted one (`reconcile`).
The serving container carries its release digest and the capsule's labels: the state and the
record are derived from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mur.deploy import auth
from mur.deploy.lock import Holder, TargetLock, held_here, locks_dir
from mur.deploy.observe import Truth
from mur.deploy.plan import pick_port
from mur.deploy.preflight import Report
from mur.deploy.providers.base import (
    Context, DeployJob, Outcome, forget_reservation, new_record, read_token, undo_or_leave,
)
from mur.deploy.providers.docker import (
    L, PIN_LABEL, RELEASE_LABEL, ContainerService, DockerBuild, destroy_containers, leftovers, reconcile,
)
from mur.deploy.state import Deployment, Release, now_rfc3339, uninterrupted
from mur.deploy.targets import TargetSpec
from mur.deploy.targets.docker import LABEL, container_name, image_repo
from mur.deploy.targets.base import quoted
from mur.deploy.targets.local import LocalTarget
from mur.deploy.undo import Attempt, Phase
from mur.engine.containers import ContainerInfo
from mur.engine.docker import DockerEngine
from mur.errors import MurError

REPAIR = "run `mur deploy --docker` again (it puts the containers back in order), or `mur deploy destroy {id}`"


def docker_lock(dep_id: str, ctx: Context, command: str, wait: float | None = None) -> TargetLock:
    return TargetLock(LocalTarget(), f"docker-{dep_id}", command=command,
                      wait=ctx.lock_wait if wait is None else wait, reporter=ctx.reporter, deadlines=ctx.deadlines,
                      what=f"deployment {dep_id}")


class _LocalHold:
    """undo_or_leave's view of a Docker command: the engine's lock is a local child, never lost."""

    t = None

    def regain(self, budget: float) -> bool:
        return True


def release_of(info: ContainerInfo, port: int | None) -> Release:
    """The release a container runs, from its labels (the image's, plus the release digest)."""
    labels = info.labels
    return Release(digest=labels.get(RELEASE_LABEL, ""), port=port, image=info.image_tags[0] if info.image_tags else None,
                   bundle_version=labels.get(f"{L}mur_version", ""),
                   extra={"capsule_digest": labels.get(f"{L}capsule.digest"),
                          "capsule": {"name": labels.get(f"{L}capsule.name"), "version": labels.get(f"{L}capsule.version")}})


class DockerDeploy:
    """One `mur deploy --docker` (steps beside their undo: mur.deploy.undo)."""

    def __init__(self, job: DeployJob):
        self.job, self.ctx, self.r = job, job.ctx, job.ctx.reporter
        self.b: DockerBuild  # connected to the engine in run(): a failed connect is undone like any step
        self.engine: DockerEngine
        self.name, self.prev_name = container_name(job.dep_id), container_name(job.dep_id, "prev")
        self.a = Attempt("mur deploy --docker")
        self.lock: TargetLock | None = None
        self.rec: Deployment | None = None
        self.moved_prev = False
        self.was_running = False

    def run(self) -> Outcome:
        try:
            return self._run()
        except BaseException as exc:
            self._fail(exc)
            raise
        finally:
            if self.lock is not None:
                self.lock.release()

    def _run(self) -> Outcome:
        self.b = DockerBuild(self.job)
        self.engine = self.b.engine
        job, b, engine, a, ctx = self.job, self.b, self.engine, self.a, self.ctx
        self.lock = docker_lock(job.dep_id, ctx, f"mur deploy --docker {job.dep_id}").acquire()
        a.advance(Phase.LOCKED)
        a.push("remove what this deploy left of a deployment that does not exist", self._tidy)
        report = b.prepare()
        report.raise_if_failed()
        a.advance(Phase.CHECKED)
        for note in reconcile(engine, job.dep_id):
            self.r.note(note)
        current = engine.container(self.name)
        first = current is None
        rec = new_record(job, b.runtime, home="/", init="docker", port=b.port, bind=b.bind,
                         url=f"{'https' if b.tls else 'http'}://127.0.0.1:{b.port}", boot="docker",
                         token_file=b.token_file, tls=b.tls)
        rec.container, rec.image = self.name, b.image.tag
        rec.pending = {"command": "deploy", "at": now_rfc3339(), "phase": "recorded"}
        old = ctx.store.get(job.dep_id)
        with uninterrupted():
            self.rec = ctx.store.save(rec)
        a.push("remove the deployment's containers and images" if first else "restore the record",
               self._remove_all if first else (lambda: self._restore(old)))
        a.advance(Phase.RECORDED)

        changed = current is not None and current.labels.get(RELEASE_LABEL) != b.plan.digest
        svc = b.service(self.name)
        repaired = None
        if current is not None and not changed:
            st = svc.state()
            card = svc.answers(b.port, b.token, b.pin) if st.running and not st.looping else {"ok": False}
            if card.get("ok"):
                return self._done(rec, card, unchanged=True, release=release_of(current, b.port))
            repaired = f"container {self.name} ({current.status}) did not answer: recreated"
            self.r.note(f"repair: {repaired}")
        self.was_running = current is not None and current.status == "running"
        if changed and self.was_running and svc.state().ready:
            a.push("remove the smoke-start container",
                   lambda: engine.remove(container_name(job.dep_id, "candidate")))
            with ctx.phase("smoke", "smoke-start the new release beside the serving container"):
                self._smoke()
            a.advance(Phase.SMOKED)
        if changed:
            a.push("bring the previous container back", self._back)
        with ctx.phase("switch", f"start container {self.name}"):
            if changed:
                engine.remove(self.prev_name)
                engine.stop(self.name)
                self.moved_prev = engine.rename(self.name, self.prev_name)
            engine.create(b.image.tag, self.name, b.plan.env, b.plan.options, b.plan.labels(job.dep_id), b.plan.secrets)
            a.advance(Phase.SWITCHED)
            card = svc.wait(b.port, b.token, b.pin, job.req.start_timeout)
            if not card.get("ok"):
                log = engine.logs(self.name, tail=40)
                raise MurError("E-DEPLOY-004", f"the capsule did not start in {self.name}: {card.get('error')}\n"
                               f"logs:\n{quoted(log[-2500:])}",
                               "the previous container is serving again" if self.moved_prev else "nothing is left running")
        a.advance(Phase.STARTED)
        if changed and job.existing is not None and job.existing.release is not None:
            rec.previous = job.existing.release
        self._prune_images()
        return self._done(rec, card, unchanged=False, release=self._release(), repaired=repaired)

    def _release(self) -> Release:
        b = self.b
        labels = b.image.labels
        return Release(digest=b.plan.digest, bundle=b.runtime.name, bundle_version=b.runtime.version,
                       port=b.port, image=b.image.tag,
                       extra={"image_id": b.image.id, "capsule_digest": labels.get(f"{L}capsule.digest"),
                              "capsule": {"name": labels.get(f"{L}capsule.name"),
                                          "version": labels.get(f"{L}capsule.version")}})

    def _done(self, rec: Deployment, card: dict[str, Any], unchanged: bool, release: Release,
              repaired: str | None = None) -> Outcome:
        rec.release = release if not unchanged or rec.release is None or rec.release.digest != release.digest \
            else rec.release
        rec.status, rec.pending = "running", None
        with uninterrupted():
            self.ctx.store.save(rec)
        self.a.forget()
        self.a.advance(Phase.DONE)
        return Outcome(rec, unchanged=unchanged, uploaded=0 if unchanged else None, agent_card=card.get("agent_card"),
                       repaired=repaired)

    def _smoke(self) -> None:
        """The new release once on a spare port, beside the serving container; removed either way."""
        b, engine = self.b, self.engine
        spare = pick_port(self.job.dep_id, b.busy | {b.port}, salt=1)
        name = container_name(self.job.dep_id, "candidate")
        env = {**b.plan.env, "MUR_PORT": str(spare)}
        engine.create(b.image.tag, name, env, b.plan.options, {LABEL: self.job.dep_id}, b.plan.secrets, restart="no")
        try:
            res = b.service(name).wait(spare, b.token, b.pin, self.job.req.start_timeout)
            log = "" if res.get("ok") else engine.logs(name, tail=40)
        finally:
            engine.remove(name)
        if not res.get("ok"):
            raise MurError("E-DEPLOY-004", f"the new release did not start: {res.get('error')}\nlogs:\n{quoted(log[-1500:])}",
                           "the serving container was not touched")

    def _prune_images(self) -> None:
        """Untag the deployment's images no container of it uses any more (the image goes with its last tag)."""
        engine = self.engine
        keep = {self.b.image.tag}
        prev = engine.container(self.prev_name)
        keep |= set(prev.image_tags) if prev else set()
        repo = image_repo(self.job.dep_id)
        for _image_id, tags in engine.images(repo):
            if set(tags) & keep:
                continue
            for t in tags:
                if t.startswith(repo + ":"):
                    try:
                        engine.untag(t)
                    except MurError:
                        pass  # in use by a container being removed: the next deploy prunes it

    # undo steps -------------------------------------------------------------------------------

    def _tidy(self) -> None:
        self.engine.remove(container_name(self.job.dep_id, "candidate"))
        if all(self.engine.container(container_name(self.job.dep_id, r)) is None for r in ("", "prev", "swap")):
            destroy_containers(self.engine, self.job.dep_id)  # the image of a deployment that does not exist
            if self.lock is not None:
                self.lock.remove_files()
            forget_reservation(self.job)

    def _remove_all(self) -> None:
        destroy_containers(self.engine, self.job.dep_id)
        if self.lock is not None:
            self.lock.remove_files()
        with uninterrupted():
            self.ctx.store.remove(self.job.dep_id)
        auth.forget(self.job.dep_id)

    def _back(self) -> None:
        """The serving container again: the new one goes only once the old one was moved aside."""
        engine = self.engine
        if self.moved_prev:
            engine.remove(self.name)  # the new release's container (if it was created)
            engine.rename(self.prev_name, self.name)
            self.moved_prev = False
        if self.was_running:
            engine.start(self.name)

    def _restore(self, old: Deployment | None) -> None:
        if old is not None:
            with uninterrupted():
                self.ctx.store.save(old)

    def _fail(self, exc: BaseException) -> None:
        if self.a.phase is Phase.DONE:
            return
        if not self.a.pending():
            forget_reservation(self.job)  # nothing reached the engine (not even a connection, maybe)
            return
        undo_or_leave(self.ctx, _LocalHold(), self.a, exc, self.job.dep_id, "deploy",  # type: ignore[arg-type]
                      REPAIR.format(id=self.job.dep_id), fallback=self.rec)


class DockerProvider:
    kind = "docker"

    def check(self, job: DeployJob) -> Report:
        with docker_lock(job.dep_id, job.ctx, f"mur deploy --docker --check {job.dep_id}") as lock:
            d = DockerBuild(job)
            try:
                return d.prepare()
            finally:
                if job.existing is None:  # the image of a deployment that does not exist: leave nothing behind
                    destroy_containers(d.engine, job.dep_id)
                    lock.remove_files()

    def deploy(self, job: DeployJob) -> Outcome:
        return DockerDeploy(job).run()

    def _service(self, engine: DockerEngine, dep: Deployment) -> ContainerService:
        return ContainerService(engine, self._name(dep), dep.deployment_id)

    @staticmethod
    def _name(dep: Deployment) -> str:
        return dep.container or container_name(dep.deployment_id)

    def status(self, dep: Deployment, ctx: Context) -> dict[str, Any]:
        engine = DockerEngine.for_deploy()
        info = engine.container(self._name(dep))
        svc = self._service(engine, dep)
        st = svc.state()
        card: dict[str, Any] = {"ok": False, "error": "container not running"}
        pin = info.labels.get(PIN_LABEL, dep.tls_pin) if info is not None else dep.tls_pin
        if info is not None and info.status == "running":
            card = svc.answers(int(dep.service_port or 0), read_token(dep), pin)
        truth = self._truth(engine, dep, info, st, bool(card.get("ok")), ctx)

        def follow(d: Deployment) -> None:
            d.status = truth.state
            if info is not None and (truth.consistent or (truth.state in ("running", "starting", "crash-looping",
                                                                          "stopped") and not d.pending)):
                if d.release is None or d.release.digest != info.labels.get(RELEASE_LABEL):
                    d.previous, d.release = d.release, release_of(info, d.service_port)
                cap = (d.release.extra.get("capsule") if d.release else None) or {}
                d.name, d.version = cap.get("name") or d.name, cap.get("version") or d.version
                d.tls_pin = pin
                if truth.consistent:
                    d.pending = None
        with uninterrupted():
            ctx.store.update(dep.deployment_id, follow)
        state = {"state": info.status if info else "absent", "restarts": info.restart_count if info else 0,
                 "restart_policy": info.restart_policy if info else "", "last_exit": st.last_exit,
                 "crash_looping": st.looping}
        return {"status": truth.state, "state": truth.to_dict(), "service": state, "agent_card_ok": bool(card.get("ok")),
                "agent_card": card.get("agent_card"), "error": None if card.get("ok") else card.get("error")}

    def _truth(self, engine: DockerEngine, dep: Deployment, info: ContainerInfo | None, st: Any, answers: bool,
               ctx: Context) -> Truth:
        locked_by = None
        base_path = f"{locks_dir(str(Path.home()))}/docker-{dep.deployment_id}"
        if held_here(base_path + ".lock"):  # read, never taken: a status never makes a deploy fail
            try:
                holder = Holder.parse(Path(base_path + ".holder").read_text())
            except OSError:
                holder = None
            locked_by = holder.to_dict() if holder else {"command": "?"}
        left = [] if locked_by else leftovers(engine, dep.deployment_id)
        serving = info.labels.get(RELEASE_LABEL) if info is not None and info.status == "running" else None
        record = dep.release.digest if dep.release else None
        base = dict(current=None, serving=None, record=None, answers=answers, restarts=st.restarts,
                    last_exit=st.last_exit, left=left, locked_by=locked_by)
        consistent = not left and serving is not None and answers and not st.looping
        if (dep.pending or left) and not locked_by and not consistent:
            what = (dep.pending or {}).get("command", "a command")
            return Truth("incomplete", f"an interrupted {what} left " + (", ".join(left) or "its record") +
                         ": deploy again to repair it, or destroy it", **base)
        if serving and record and serving != record and not dep.pending:
            return Truth("diverged", f"container {self._name(dep)} runs release {serving[:12]}, the record "
                         f"{record[:12]}", **base)
        if st.looping:
            return Truth("crash-looping", f"the container keeps exiting: {st.restarts} restarts, last exit status "
                         f"{st.last_exit}", **base)
        if st.running and answers:
            return Truth("running", "the container serves and answers", consistent=consistent, **base)
        if st.running:
            return Truth("starting", "the container is up and has not answered yet", **base)
        return Truth("stopped", f"no container serves ({info.status if info else 'absent'})", **base)

    def logs(self, dep: Deployment, lines: int, follow: bool, sink: Callable[[bytes], None] | None,
             ctx: Context) -> str:
        return DockerEngine.for_deploy().logs(self._name(dep), lines, follow, sink)

    def start(self, dep: Deployment, ctx: Context) -> Deployment:
        engine = DockerEngine.for_deploy()
        name = self._name(dep)
        with docker_lock(dep.deployment_id, ctx, f"mur deploy start {dep.deployment_id}"):
            reconcile(engine, dep.deployment_id)
            with ctx.phase("start", f"start {name}"):
                if not engine.start(name):
                    raise MurError("E-DEPLOY-010", f"container {name} does not exist", "deploy again")
                info = engine.container(name)
                pin = info.labels.get(PIN_LABEL, dep.tls_pin) if info is not None else dep.tls_pin
                card = self._service(engine, dep).wait(int(dep.service_port or 0), read_token(dep), pin, ctx.timeout)
            if not card.get("ok"):
                raise MurError("E-DEPLOY-004", f"the capsule did not start: {card.get('error')}\nlogs:\n"
                               f"{quoted(engine.logs(name, 40)[-2500:])}")

        def change(d: Deployment) -> None:
            d.status = "running"
        with uninterrupted():
            return ctx.store.update(dep.deployment_id, change) or dep

    def stop(self, dep: Deployment, ctx: Context) -> Deployment:
        with docker_lock(dep.deployment_id, ctx, f"mur deploy stop {dep.deployment_id}"):
            with ctx.phase("stop", f"stop {self._name(dep)}"):
                DockerEngine.for_deploy().stop(self._name(dep))

        def change(d: Deployment) -> None:
            d.status = "stopped"
        with uninterrupted():
            return ctx.store.update(dep.deployment_id, change) or dep

    def destroy(self, dep: Deployment, ctx: Context) -> None:
        with docker_lock(dep.deployment_id, ctx, f"mur deploy destroy {dep.deployment_id}") as lock:
            with ctx.phase("destroy", f"destroy {self._name(dep)}"):
                destroy_containers(DockerEngine.for_deploy(), dep.deployment_id)
                lock.remove_files()

    def rollback(self, dep: Deployment, ctx: Context, to: int | str | None = None) -> Deployment:
        engine = DockerEngine.for_deploy()
        dep_id = dep.deployment_id
        name, prev, swap = container_name(dep_id), container_name(dep_id, "prev"), container_name(dep_id, "swap")
        with docker_lock(dep_id, ctx, f"mur deploy rollback {dep_id}"):
            for note in reconcile(engine, dep_id):
                ctx.reporter.note(note)
            before, back = engine.container(name), engine.container(prev)
            if back is None:
                raise MurError("E-DEPLOY-011", f"deployment {dep_id} has no previous container ({prev}) to roll back to",
                               "rollback needs at least two deploys with different releases")
            if to is not None and str(to) not in back.image_tags and str(to) != back.labels.get(RELEASE_LABEL):
                raise MurError("E-DEPLOY-011", f"the previous container runs {', '.join(back.image_tags) or '?'}, "
                               f"not {to}", "a Docker deployment keeps one previous release")
            a = Attempt("mur deploy rollback", Phase.LOCKED)
            moved: list[str] = []

            def undo() -> None:
                if "prev" in moved:
                    engine.stop(name)
                    engine.rename(name, prev)
                if "swap" in moved:
                    engine.rename(swap, name)
                    engine.start(name)

            try:
                a.push("put the serving container back", undo)
                with ctx.phase("switch", f"switch to the previous container ({', '.join(back.image_tags) or prev})"):
                    engine.stop(name)
                    engine.remove(swap)
                    if engine.rename(name, swap):
                        moved.append("swap")
                    engine.rename(prev, name)
                    moved.append("prev")
                    engine.start(name)
                    card = self._service(engine, dep).wait(int(dep.service_port or 0), read_token(dep),
                                                           back.labels.get(PIN_LABEL, dep.tls_pin), ctx.timeout)
                    if not card.get("ok"):
                        log = engine.logs(name, 40)
                        raise MurError("E-DEPLOY-004", f"the previous release did not start: {card.get('error')}\n"
                                       f"logs:\n{quoted(log[-2500:])}", "switched back to the current release")
                    engine.rename(swap, prev)
                a.advance(Phase.DONE)
            except BaseException as exc:
                undo_or_leave(ctx, _LocalHold(), a, exc, dep_id, "rollback",  # type: ignore[arg-type]
                              REPAIR.format(id=dep_id))
                raise
            now = engine.container(name)
        rolled = release_of(now, dep.service_port) if now is not None else dep.previous

        def done(d: Deployment) -> None:
            d.previous = release_of(before, d.service_port) if before is not None else d.release
            d.release = rolled
            d.image = rolled.image if rolled and rolled.image else d.image
            d.tls_pin = back.labels.get(PIN_LABEL, d.tls_pin)
            cap = (rolled.extra.get("capsule") if rolled else None) or {}
            d.name, d.version = cap.get("name") or d.name, cap.get("version") or d.version
            d.status, d.pending = "running", None
        with uninterrupted():
            return ctx.store.update(dep_id, done) or dep

    def gc(self, spec: TargetSpec, ctx: Context) -> dict[str, Any]:
        """Put the containers of this HOME's deployments back in order, those whose lock is free (never
        waits; another HOME's deployments have their lock elsewhere, so they are not touched)."""
        engine = DockerEngine.for_deploy()
        removed, skipped = [], []
        mine = {d.deployment_id for d in ctx.store.load() if d.provider == "docker"}
        ids = sorted(({c.labels.get(LABEL, "") for c in engine.labelled(LABEL)} - {""}) & mine)
        for dep_id in ids:
            try:
                with docker_lock(dep_id, ctx, "mur deploy gc", wait=0):
                    removed += [f"{dep_id}: {x}" for x in reconcile(engine, dep_id)]
            except MurError as err:
                if err.code != "E-DEPLOY-013":
                    raise
                skipped.append(f"{dep_id} (locked)")
        return {"target": "docker", "removed": removed, "skipped": skipped}
