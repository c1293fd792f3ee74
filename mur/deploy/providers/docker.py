"""The Docker engine: the capsule as an image built on the local base image, one supervised
container per deployment.

The same release plan as a host is materialised into an image (`capsule_image`: the one call a
different image builder replaces), so the container holds exactly the layout a host does; `mur
supervise run` is its main process (under tini). Secrets (env file, A2A token, TLS key) are copied
into the created container before it starts, never into an image layer. The previous container is
kept stopped as `-prev`: a failed start or a rollback brings it back with its own secrets. Restart
policy `unless-stopped`: it comes back after a crash, an engine restart or a reboot.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from mur import __version__
from mur.deploy.plan import (
    LISTENING_COMMAND, ReleaseInputs, ReleasePlan, choose_port, listening_ports, pick_port, plan_release,
)
from mur.deploy.preflight import Report, containment_check, parse_probe, parse_version
from mur.deploy.providers.base import (
    Context, DeployJob, Outcome, Service, UndoableDeploy, bundle_ref, credentials, new_record, observed_status,
    read_token,
)
from mur.deploy.state import Deployment, Release
from mur.deploy.steps import Layout, Mkdir, ServiceConfig, ServiceState, Step, Symlink, Upload, WriteFile
from mur.deploy.targets.docker import (
    CAPSULE_DOCKERFILE, ENTRYPOINT, LABEL, ContainerTarget, DockerEngine, container_name, image_repo, image_tag,
)
from mur.errors import MurError
from mur.platform import platform_tag

HOME = "/root"
RELEASE_LABEL = "dev.mur.release"


def materialise(steps: list[Step], root: Path, skip: set[str]) -> None:
    """Write a release plan into a directory tree (absolute target paths re-rooted at `root`)."""
    def local(p: str) -> Path:
        return root / p.lstrip("/")

    for step in steps:
        if isinstance(step, Mkdir):
            local(step.path).mkdir(parents=True, exist_ok=True)
            os.chmod(local(step.path), step.mode)
        elif isinstance(step, (Upload, WriteFile)) and step.dst not in skip:
            dst = local(step.dst)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(step, WriteFile):
                dst.write_bytes(step.content)
            else:
                try:
                    os.link(step.src, dst)
                except OSError:
                    shutil.copyfile(step.src, dst)
            os.chmod(dst, step.mode)
        elif isinstance(step, Symlink):
            link = local(step.link)
            link.parent.mkdir(parents=True, exist_ok=True)
            if link.is_symlink() or link.exists():
                link.unlink()
            os.symlink(step.target, link)


def secrets_of(plan: ReleasePlan) -> dict[str, tuple[bytes, int]]:
    """Files that never enter an image layer: copied into each created container instead."""
    lay = plan.layout
    wanted = {f"{plan.release_dir}/env", lay.token_file, lay.tls_key, lay.tls_cert}
    out: dict[str, tuple[bytes, int]] = {}
    for step in plan.prepare:
        if isinstance(step, WriteFile) and step.dst in wanted:
            out[step.dst] = (step.content, step.mode)
        elif isinstance(step, Upload) and step.dst in wanted:
            out[step.dst] = (Path(step.src).read_bytes(), step.mode)
    return out


def capsule_image(engine: DockerEngine, plan: ReleasePlan, base: str, reporter: Any) -> str:
    """The capsule image of a release (built once per content; reused when present)."""
    import hashlib

    key = hashlib.sha256(json.dumps({"capsule": plan.capsule_digest, "bundle": plan.release_meta["bundle_sha256"],
                                     "spec": plan.service_spec}, sort_keys=True).encode()).hexdigest()
    tag = image_tag(plan.layout.dep_id, key)
    if engine.has_image(tag):
        return tag
    bundle_src = next(s.src for s in plan.prepare if isinstance(s, Upload) and s.dst.startswith(plan.layout.bin_dir))
    with reporter.step(f"build image {tag}"), tempfile.TemporaryDirectory(prefix="mur-ctx-",
                                                                         dir=str(Path(bundle_src).parent)) as tmp:
        ctx = Path(tmp)
        materialise([*plan.prepare, Symlink("releases/1", plan.layout.current)], ctx, set(secrets_of(plan)))
        (ctx / "Dockerfile").write_text(CAPSULE_DOCKERFILE)
        (ctx / "mur-entrypoint").write_text(ENTRYPOINT)
        os.chmod(ctx / "mur-entrypoint", 0o755)
        engine.build(ctx, tag, base, {LABEL: plan.layout.dep_id, "dev.mur.digest": plan.digest})
    return tag


def _command(lay: Layout) -> list[str]:
    return [f"{lay.current}/mur", "supervise", "run", "--log-stdout", "--spec", f"{lay.current}/service.json"]


class ContainerService(Service):
    """The supervisor inside a container. It is the container's main process, so a state file that
    says it stopped while the container runs is the previous run's: the container was just
    (re)started and its supervisor has not written yet."""

    def __init__(self, engine: DockerEngine, name: str, dep_id: str):
        super().__init__(ContainerTarget(engine, name), Layout(HOME, dep_id), "supervisor", False)
        self.engine, self.name = engine, name

    def state(self) -> ServiceState:
        st = super().state()
        if st.exited:
            info = self.engine.container(self.name)
            if info is not None and info.status == "running":
                return ServiceState("starting")
        return st


class DockerDeploy(UndoableDeploy):
    """One `mur deploy --docker`, with the state `_abort` needs to undo it."""

    def __init__(self, job: DeployJob):
        self.job, self.ctx, self.r = job, job.ctx, job.ctx.reporter
        self.engine = DockerEngine()
        self.name = container_name(job.dep_id)
        self.prev_name = container_name(job.dep_id, "prev")
        self.phase = "prepare"
        self.rec: Deployment | None = None
        self.moved_prev = False

    def prepare(self) -> Report:
        job, engine, req, cap = self.job, self.engine, self.job.req, self.job.capsule
        info = engine.info()
        if not engine.has_image(req.base_image):
            raise MurError("E-DEPLOY-010", f"base image {req.base_image} is not present in the engine",
                           "build it with images/build-base.sh (no registry is used)")
        plat = platform_tag(str(info.get("OSType", "linux")), str(info.get("Architecture", "x86_64")))
        with self.r.step(f"mur {cap.mur_version or __version__} runtime for {plat}"):
            self.runtime = self.ctx.runtime(req, cap, plat, self.r.note)
        _status, out = engine.run_once(req.base_image, ["/bin/sh", "-c", LISTENING_COMMAND], {"network_mode": "host"}, 60)
        self.busy = listening_ports(out)
        self.port = choose_port(job.dep_id, cap.internal_port, job.existing.service_port if job.existing else None,
                                self.busy, "the Docker host")
        self.token_file, self.token, self.tls = credentials(job, "127.0.0.1")
        self.pin = self.tls.pin_sha256 if self.tls else None
        bind = "0.0.0.0" if req.publish else "127.0.0.1"
        svc = ServiceConfig(port=self.port, bind=bind, restart=cap.restart_policy, init="supervisor",
                            memory_bytes=cap.service_memory_bytes, tasks_max=cap.service_tasks_max,
                            env=tuple(sorted(cap.env.items())), run_args=cap.run_args, keep_sessions=req.keep_sessions,
                            boot="docker", tls=self.tls is not None, tls_pin=self.pin or "")
        compiled = self.ctx.precompile(req, cap, self.runtime.platform, self.r)
        self.plan = plan_release(ReleaseInputs(
            dep_id=job.dep_id, home=HOME, n=1, bundle=bundle_ref(self.runtime), manifest=cap.manifest, files=cap.files,
            workdir=cap.workdir, artifacts=cap.artifacts, service=svc, precompiled=compiled, capsule_name=cap.name,
            capsule_version=cap.version, token=self.token, tls=self.tls))
        self.tag = capsule_image(engine, self.plan, req.base_image, self.r)
        apparmor = any("apparmor" in str(o) for o in info.get("SecurityOptions") or [])
        self.kwargs = engine.run_kwargs(seccomp_profile=req.seccomp_profile, apparmor=apparmor)
        with self.r.step("preflight (probe container)"):
            return self._preflight(info, plat)

    def _preflight(self, info: dict[str, Any], plat: str) -> Report:
        report = Report(self.engine.label, "docker")
        report.facts.update({"platform": plat, "init": "supervisor (container main process, tini as PID 1)",
                             "boot": "docker (restart policy unless-stopped)",
                             "engine_cgroup": f"v{info.get('CgroupVersion', '?')} {info.get('CgroupDriver', '')}".strip(),
                             "kernel": info.get("KernelVersion"), "base_image": self.job.req.base_image})
        bundle = Layout(HOME, "probe").bundle(self.runtime.name)
        status, out = self.engine.run_once(self.tag, ["/bin/sh", "-c", f"{bundle} --version; {bundle} probe --json"],
                                           self.kwargs, timeout=300)
        lines = out.strip().splitlines()
        got = parse_version(lines[0]) if lines else ""
        report.facts["runtime"] = {"version": got, "pinned": self.runtime.version, "sha256": self.runtime.sha256}
        report.add("runtime", got == self.runtime.version,
                   f"{self.runtime.name} reports {got or '(nothing)'}; pinned {self.runtime.version}")
        if status != 0:
            report.add("probe", False, f"probe container exited {status}: {out.strip()[-400:]}")
            return report
        probe = parse_probe(out)
        report.probe = probe
        report.facts.update({k: probe.get(k) for k in ("landlock_abi", "seccomp", "cgroup_mode")})
        report.add("landlock", True, f"ABI {probe.get('landlock_abi')} inside the container (kernel {probe.get('kernel')})",
                   fatal=False)
        report.add("seccomp", True, "available" if probe.get("seccomp") else "unavailable", fatal=False)
        delegated = bool(probe.get("cgroup_delegated"))
        cap = self.job.capsule
        report.facts["cgroup_sessions"] = delegated
        report.add("cgroup", delegated or not cap.needs_subprocess,
                   f"{probe.get('cgroup_mode')} in a private cgroup namespace; sub-cgroups "
                   + ("can be created (remounted rw)" if delegated else "cannot be created"), fatal=cap.needs_subprocess)
        containment_check(report, cap, probe)
        return report

    def service(self, name: str) -> Service:
        return ContainerService(self.engine, name, self.job.dep_id)

    def _run(self) -> Outcome:
        job, engine = self.job, self.engine
        report = self.prepare()
        report.raise_if_failed()
        rec = new_record(job, self.runtime, home=HOME, init="supervisor", port=self.port,
                         bind=self.plan.service_spec["bind"], url=f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}",
                         boot="docker", token_file=self.token_file, tls=self.tls)
        rec.container, rec.image = self.name, self.tag
        self.rec = self.ctx.store.save(rec)
        self.phase = "recorded"
        current = engine.container(self.name)
        changed = current is not None and current.labels.get(RELEASE_LABEL) != self.plan.digest
        if current is not None and not changed and current.status == "running":
            card = self.service(self.name).wait(self.port, self.token, self.pin, 15)
            if card.get("ok"):
                return self._done(rec, card, unchanged=True)
        if changed and current is not None and current.status == "running":
            self.phase = "smoke"
            with self.r.step("smoke-start the new release beside the serving container"):
                self._smoke()
        self.phase = "switch"
        with self.r.step(f"start container {self.name}"):
            if changed:
                engine.remove(self.prev_name)
                engine.stop(self.name)
                self.moved_prev = engine.rename(self.name, self.prev_name)
            engine.create(self.tag, self.name, _command(self.plan.layout), self.kwargs,
                          {LABEL: job.dep_id, RELEASE_LABEL: self.plan.digest}, secrets_of(self.plan))
            card = self.service(self.name).wait(self.port, self.token, self.pin, job.req.start_timeout)
            if not card.get("ok"):
                log = engine.logs(self.name, tail=40)
                raise MurError("E-DEPLOY-004", f"the capsule did not start in {self.name}: {card.get('error')}\n"
                               f"logs:\n{log[-2500:]}",
                               "the previous container is serving again" if self.moved_prev else "nothing is left running")
        if changed and job.existing is not None:
            rec.previous = job.existing.release
        self._prune_images()
        return self._done(rec, card, unchanged=False)

    def _done(self, rec: Deployment, card: dict[str, Any], unchanged: bool) -> Outcome:
        if not unchanged or rec.release is None:
            rec.release = Release.from_dict({**self.plan.release_meta, "n": None, "image": self.tag})
        rec.status, self.phase = "running", "done"
        self.ctx.store.save(rec)
        return Outcome(rec, unchanged=unchanged, uploaded=0 if unchanged else None, agent_card=card.get("agent_card"))

    def _smoke(self) -> None:
        lay, rel, timeout = self.plan.layout, self.plan.release_dir, self.job.req.start_timeout
        spare = pick_port(self.job.dep_id, self.busy | {self.port}, salt=1)
        name = container_name(self.job.dep_id, "candidate")
        self.engine.create(self.tag, name, [f"{rel}/mur", "supervise", "smoke", "--spec", f"{rel}/service.json",
                                            "--release-dir", rel, "--port", str(spare), "--timeout", str(int(timeout))],
                           self.kwargs, {LABEL: self.job.dep_id}, secrets_of(self.plan), restart="no")
        try:
            _status, out = self.engine.wait(name, timeout + 60)
        finally:
            self.engine.remove(name)
        try:
            res = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            res = {"ok": False, "error": out[-800:]}
        if not res.get("ok"):
            raise MurError("E-DEPLOY-004", f"the new image did not start: {res.get('error')}\nstderr:\n"
                           f"{(res.get('stderr') or '').strip()[-1500:]}", "the serving container was not touched")
        del lay

    def _prune_images(self) -> None:
        keep = {self.tag}
        prev = self.engine.container(self.prev_name)
        keep |= set(prev.image_tags) if prev else set()
        for image_id, tags in self.engine.images(image_repo(self.job.dep_id)):
            if not set(tags) & keep:
                try:
                    self.engine.remove_image(image_id)
                except MurError:
                    pass  # in use by a container being removed: the next deploy prunes it

    def _abort(self, exc: BaseException) -> None:
        engine, job = self.engine, self.job
        if self.phase == "done":
            return
        if self.rec is None:  # refused before anything ran: only a fresh deployment's image to remove
            if job.existing is None:
                try:
                    destroy_containers(engine, job.dep_id)
                except BaseException:  # noqa: BLE001 - best effort; the original error is what matters
                    pass
            return
        try:
            with self.r.step("undoing this deploy"):
                engine.remove(container_name(job.dep_id, "candidate"))
                if self.phase == "switch":
                    engine.remove(self.name)
                    if self.moved_prev:
                        engine.rename(self.prev_name, self.name)
                        engine.start(self.name)
                if job.existing is None:
                    destroy_containers(engine, job.dep_id)
                    self.ctx.store.remove(job.dep_id)
                    from mur.deploy import auth

                    auth.forget(job.dep_id)
                else:
                    self.ctx.store.save(job.existing)
        except BaseException:  # noqa: BLE001 - keep the record for destroy
            self.r.note(f"could not undo everything: {job.dep_id} stays recorded as incomplete; "
                        f"`mur deploy destroy {job.dep_id}` removes it")


def destroy_containers(engine: DockerEngine, dep_id: str) -> list[str]:
    for role in ("", "prev", "candidate", "swap"):
        engine.remove(container_name(dep_id, role))
    removed = []
    for image_id, tags in engine.images(image_repo(dep_id)):
        engine.remove_image(image_id)
        removed += list(tags)
    return removed


class DockerProvider:
    kind = "docker"

    def check(self, job: DeployJob) -> Report:
        d = DockerDeploy(job)
        report = d.prepare()
        if job.existing is None:  # the probe image of a deployment that does not exist: leave nothing behind
            destroy_containers(d.engine, job.dep_id)
        return report

    def deploy(self, job: DeployJob) -> Outcome:
        return DockerDeploy(job).run()

    def _service(self, engine: DockerEngine, dep: Deployment) -> Service:
        return ContainerService(engine, self._name(dep), dep.deployment_id)

    @staticmethod
    def _name(dep: Deployment) -> str:
        return dep.container or container_name(dep.deployment_id)

    def status(self, dep: Deployment, ctx: Context) -> dict[str, Any]:
        engine = DockerEngine()
        info = engine.container(self._name(dep))
        state: dict[str, Any] = {"state": info.status if info else "absent", "restarts": info.restart_count if info else 0,
                                 "restart_policy": info.restart_policy if info else ""}
        card: dict[str, Any] = {"ok": False, "error": "container not running"}
        if info is not None and info.status == "running":
            svc = self._service(engine, dep)
            st = svc.state()
            state["supervisor"] = st.to_dict()
            if st.running:
                card = svc.answers(int(dep.service_port or 0), read_token(dep), dep.tls_pin)
        running = info is not None and info.status == "running"
        dep.status = observed_status(dep, running, bool(card.get("ok")))
        ctx.store.save(dep)
        return {"service": state, "agent_card_ok": bool(card.get("ok")), "agent_card": card.get("agent_card"),
                "error": None if card.get("ok") else card.get("error")}

    def logs(self, dep: Deployment, lines: int, follow: bool, sink: Callable[[bytes], None] | None,
             ctx: Context) -> str:
        return DockerEngine().logs(self._name(dep), lines, follow, sink)

    def start(self, dep: Deployment, ctx: Context) -> Deployment:
        engine = DockerEngine()
        name = self._name(dep)
        with ctx.reporter.step(f"start {name}"):
            if not engine.start(name):
                raise MurError("E-DEPLOY-010", f"container {name} does not exist", "deploy again")
            card = self._service(engine, dep).wait(int(dep.service_port or 0), read_token(dep), dep.tls_pin, ctx.timeout)
        if not card.get("ok"):
            raise MurError("E-DEPLOY-004", f"the capsule did not start: {card.get('error')}\nlogs:\n"
                           f"{engine.logs(name, 40)[-2500:]}")
        dep.status = "running"
        return ctx.store.save(dep)

    def stop(self, dep: Deployment, ctx: Context) -> Deployment:
        with ctx.reporter.step(f"stop {self._name(dep)}"):
            DockerEngine().stop(self._name(dep))
        dep.status = "stopped"
        return ctx.store.save(dep)

    def destroy(self, dep: Deployment, ctx: Context) -> None:
        with ctx.reporter.step(f"destroy {self._name(dep)}"):
            destroy_containers(DockerEngine(), dep.deployment_id)

    def rollback(self, dep: Deployment, ctx: Context) -> Deployment:
        engine = DockerEngine()
        dep_id = dep.deployment_id
        name, prev, swap = container_name(dep_id), container_name(dep_id, "prev"), container_name(dep_id, "swap")
        if engine.container(prev) is None:
            raise MurError("E-DEPLOY-011", f"deployment {dep_id} has no previous container ({prev}) to roll back to",
                           "rollback needs at least two deploys with different releases")
        label = dep.previous.image if dep.previous else "previous"
        with ctx.reporter.step(f"switch to the previous container ({label})"):
            engine.stop(name)
            engine.remove(swap)
            engine.rename(name, swap)
            engine.rename(prev, name)
            engine.start(name)
            card = self._service(engine, dep).wait(int(dep.service_port or 0), read_token(dep), dep.tls_pin, ctx.timeout)
            if not card.get("ok"):
                log = engine.logs(name, 40)
                engine.stop(name)
                engine.rename(name, prev)
                engine.rename(swap, name)
                engine.start(name)
                raise MurError("E-DEPLOY-004", f"the previous release did not start: {card.get('error')}\nlogs:\n"
                               f"{log[-2500:]}", "switched back to the current release")
            engine.rename(swap, prev)
        dep.release, dep.previous, dep.status = dep.previous, dep.release, "running"
        dep.image = dep.release.image if dep.release else dep.image
        return ctx.store.save(dep)
