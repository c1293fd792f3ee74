"""The Docker engine: the capsule image of mur.image (the one image builder), one container per deployment.

The image is `mur image build`'s (built here with `mur.image.build.build_image`, or a prebuilt one
given with `--image TAG` / `--image-archive FILE`, checked against the manifest by its labels), tagged
into the deployment's repository (`image_repo(dep_id)`), so prune and destroy find exactly its images.
Docker is the supervisor: the image's entrypoint (mur-serve: `mur run` serving A2A) is the container's
main process and the restart policy `unless-stopped` brings it back after a crash, an engine restart
or a reboot. There is no `mur supervise` inside.

The container runs as the image's user (the builder's non-root `mur`, 10001): it needs nothing only
root gives. Shell tools cannot get a session cgroup of their own there, so the container's own cgroup
is their aggregate bound (mur.sandbox.enclosing): `mem_limit` is the manifest's cgroup_memory_bytes,
and there is no pids.max (one at cgroup_pids_max would also count the runtime's own threads), so the
tools' RLIMIT_NPROC bounds their tasks. A capsule without shell tools gets the service limits.

Secrets (env file, A2A token, TLS key and certificate) are copied into each created container under
/run/mur (0600, owned by the image's user) before it starts, never into an image layer or the
container's config; the image's entrypoint reads them through MUR_ENV_FILE, MURMUR_A2A_TOKEN_FILE,
MURMUR_A2A_TLS_CERT/KEY. The previous container is kept stopped as `-prev`: a failed start or a
rollback brings it back with its own secrets.

This module prepares (the image, the plan, the preflight) and puts an interrupted deployment's
containers back in order (`reconcile`); mur.deploy.providers.dockerops runs the commands.
"""

from __future__ import annotations

import hashlib
import json
import time
from calendar import timegm
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mur import __version__
from mur.deploy.env import render_env_file
from mur.deploy.plan import LISTENING_COMMAND, choose_port, listening_ports
from mur.deploy.preflight import Report, containment_check, parse_probe, parse_version
from mur.deploy.providers.base import DeployJob, Service, credentials, wait_ready
from mur.deploy.steps import Layout, ServiceState, Tls
from mur.deploy.targets.docker import (
    LABEL, SECRETS_DIR, ContainerTarget, container_name, container_options, image_repo, image_tag,
)
from mur.engine.containers import Secret
from mur.engine.docker import DockerEngine
from mur.errors import MurError
from mur.platform import platform_tag
from mur.runtime.bundle import Bundle

RELEASE_LABEL = "dev.mur.release"
PIN_LABEL = "dev.mur.tls.pin"
L = "dev.mur."  # mur.image.spec.LABEL_PREFIX
IMAGE_HINT = "build it with `mur image build -m MANIFEST -t TAG`, pull it, or load one with --image-archive FILE"


# --- the plan, as data ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageFacts:
    """What deploy takes from a capsule image: its tag in the deployment's repository, ID, user, labels."""

    tag: str
    id: str
    uid: int
    gid: int
    labels: dict[str, str]
    platform: str

    @property
    def mur_version(self) -> str:
        return self.labels.get(f"{L}mur_version", "")


@dataclass(frozen=True)
class ContainerPlan:
    """One release's container: environment, secrets, engine options, labels, and its digest."""

    env: dict[str, str]
    secrets: dict[str, Secret]
    options: dict[str, Any]
    digest: str  # what makes a redeploy a change: image, config, secrets, options
    pin: str | None = None  # the certificate's pin when it serves TLS (each container its own)

    def labels(self, dep_id: str) -> dict[str, str]:
        out = {LABEL: dep_id, RELEASE_LABEL: self.digest}
        if self.pin:
            out[PIN_LABEL] = self.pin
        return out


def limits(cap: Any) -> tuple[int, int | None]:
    """(memory bytes, pids.max or None) of the container: the aggregate bound of shell tools, else the service's."""
    res = cap.capsule.capabilities.resources
    if cap.needs_subprocess:
        return int(res.cgroup_memory_bytes), None
    return cap.service_memory_bytes, cap.service_tasks_max


def container_plan(image: ImageFacts, *, port: int, bind: str, env: dict[str, str], token: bytes,
                   tls: tuple[bytes, bytes] | None, options: dict[str, Any], pin: str | None = None) -> ContainerPlan:
    """The container of a release (pure): secrets under /run/mur, pointed to by the entrypoint's variables."""
    def secret(data: bytes) -> Secret:
        return Secret(data, image.uid, image.gid)

    secrets = {f"{SECRETS_DIR}/env": secret(render_env_file(dict(sorted(env.items())))),
               f"{SECRETS_DIR}/a2a-token": secret(token + b"\n")}
    cenv = {"MUR_PORT": str(port), "MUR_BIND": bind, "MUR_ENV_FILE": f"{SECRETS_DIR}/env",
            "MURMUR_A2A_TOKEN_FILE": f"{SECRETS_DIR}/a2a-token"}
    if tls is not None:
        secrets[f"{SECRETS_DIR}/tls.crt"], secrets[f"{SECRETS_DIR}/tls.key"] = secret(tls[0]), secret(tls[1])
        cenv.update({"MURMUR_A2A_TLS_CERT": f"{SECRETS_DIR}/tls.crt", "MURMUR_A2A_TLS_KEY": f"{SECRETS_DIR}/tls.key"})
    h = hashlib.sha256(json.dumps({"image": image.id, "env": cenv, "options": options}, sort_keys=True).encode())
    for path, s in sorted(secrets.items()):
        h.update(path.encode() + b"\0" + hashlib.sha256(s.data).digest())
    return ContainerPlan(cenv, secrets, options, h.hexdigest(), pin if tls is not None else None)


def image_user(config_user: str) -> tuple[int, int]:
    """The numeric uid:gid of an image's `User` ("" is root); mur's images always give numbers."""
    uid, _, gid = (config_user or "0").partition(":")
    try:
        return int(uid), int(gid or uid)
    except ValueError as exc:
        raise MurError("E-DEPLOY-012", f"the image runs as user '{config_user}', not a numeric uid:gid",
                       "mur capsule images (mur image build) run as 10001:10001") from exc


def label_mismatch(labels: dict[str, str], cap: Any) -> list[str]:
    """Where a prebuilt image's labels disagree with the manifest being deployed (empty: it is this capsule)."""
    want = {"capsule.name": cap.name, "capsule.version": cap.version, "capsule.digest": cap.digest,
            "mur_version": cap.mur_version or __version__}
    return [f"{key} is {labels.get(L + key) or '(none)'}, the manifest's {value}"
            for key, value in want.items() if labels.get(L + key) != value]


def _since(started_at: str) -> int:
    """RFC 3339 (Docker's StartedAt, nanoseconds) -> unix seconds, rounded down; 0 when unknown."""
    try:
        return timegm(time.strptime(started_at[:19], "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return 0


def _startup(line: str) -> bool:
    """The runtime's startup JSON line (it carries the url it serves)."""
    if not line.startswith("{"):
        return False
    try:
        return "url" in json.loads(line)
    except ValueError:
        return False


# --- the service -----------------------------------------------------------------------------------


class ContainerService(Service):
    """A deployment's container, as the engine reports it: running (or restarting) is the service up;
    ready once the runtime printed its startup JSON line in the current run."""

    def __init__(self, engine: DockerEngine, name: str, dep_id: str):
        super().__init__(ContainerTarget(engine, name), Layout("/", dep_id), "supervisor", False)
        self.engine, self.name = engine, name

    def state(self) -> ServiceState:
        info = self.engine.container(self.name)
        if info is None:
            return ServiceState("absent", exited=True)
        running = info.status in ("running", "restarting")
        ready = info.status == "running" and any(
            _startup(line) for line in self.engine.stdout_since(self.name, _since(info.started_at)).splitlines())
        looping = info.status == "restarting" or (info.status == "running" and info.restart_count > 0 and not ready)
        return ServiceState(info.status, running=running, ready=ready,
                            exited=info.status in ("exited", "dead") and info.restart_policy in ("no", ""),
                            restarts=info.restart_count, looping=looping,
                            last_exit=info.exit_code if info.restart_count or info.status != "running" else None,
                            detail=(("release", info.labels.get(RELEASE_LABEL, "")),))

    def log_tail(self, lines: int = 40) -> str:
        return self.engine.logs(self.name, tail=lines).strip()[-3000:]

    def wait_start(self, port: int, token: bytes | None, pin: str | None, timeout: float) -> dict[str, Any]:
        """Wait for a freshly created container: a restart or an exit before it answers is a failed start."""
        first = self.engine.container(self.name)
        base = first.restart_count if first else 0

        def state() -> ServiceState:
            st = self.state()
            info = self.engine.container(self.name)
            exited = info is None or info.status in ("exited", "dead")
            return ServiceState(st.state, st.running, st.ready, exited, st.restarts - base, last_exit=st.last_exit,
                                looping=st.looping and st.restarts > base)

        return wait_ready(state, lambda w: self._probe(port, token, pin, w), timeout)

    def _probe(self, port: int, token: bytes | None, pin: str | None, wait: float) -> dict[str, Any]:
        from mur.deploy.providers.base import endpoint_check

        return endpoint_check(self.t, port, token, pin, wait)

    def wait(self, port: int, token: bytes | None, pin: str | None, timeout: float) -> dict[str, Any]:
        return self.wait_start(port, token, pin, timeout)


# --- what a deploy prepares --------------------------------------------------------------------------------


class DockerBuild:
    """What a Docker deploy prepares before it changes anything: the image (built or checked), the
    port, the credentials, the container plan, and the preflight report (a probe container)."""

    def __init__(self, job: DeployJob, engine: DockerEngine | None = None):
        self.job, self.ctx, self.r = job, job.ctx, job.ctx.reporter
        self.engine = engine or DockerEngine.for_deploy()
        self.name = container_name(job.dep_id)
        self.prev_name = container_name(job.dep_id, "prev")

    def prepare(self) -> Report:
        job, req, cap = self.job, self.job.req, self.job.capsule
        info = self.engine.info()
        self.image, self.runtime = self._image(info)
        memory, pids = limits(cap)
        options = container_options(seccomp_profile=req.seccomp_profile, memory_bytes=memory, pids_max=pids)
        _status, out = self.engine.run_once(self.image.tag, [LISTENING_COMMAND], {"network_mode": "host"}, 60)
        self.busy = listening_ports(out)
        self.port = choose_port(job.dep_id, cap.internal_port, job.existing.service_port if job.existing else None,
                                self.busy, "the Docker host")
        self.token_file, self.token, self.tls = credentials(job, "127.0.0.1")
        self.pin = self.tls.pin_sha256 if self.tls else None
        self.bind = "0.0.0.0" if req.publish else "127.0.0.1"
        self.plan = container_plan(self.image, port=self.port, bind=self.bind, env=dict(cap.env), token=self.token,
                                   tls=_tls_bytes(self.tls), options=options, pin=self.pin)
        with self.r.step("preflight (probe container)"):
            return self._preflight(info)

    def _image(self, info: dict[str, Any]) -> tuple[ImageFacts, Bundle]:
        """The capsule image in the deployment's repository: built here, or the prebuilt one checked."""
        req, cap, dep_id = self.job.req, self.job.capsule, self.job.dep_id
        images = self.engine  # its image operations: what fails there is E-IMG-*, as for `mur image`
        if req.image_archive is not None:
            ref = self._load_archive(images, Path(req.image_archive))
        elif req.image:
            ref = req.image
        else:
            ref = None
        if ref is None:
            from mur.image.build import BuildOptions, build_image

            opts = BuildOptions(base_image=req.base_image, mur_binary=req.mur_binary,
                                release_source=req.release_source or cap.release_source, precompile=req.precompile)
            provisional = f"{image_repo(dep_id)}:build"
            built = build_image(cap, provisional, self.r, opts, images)
            image_id = built.image.id
        else:
            attrs = images.inspect(ref)
            if attrs is None:
                raise MurError("E-DEPLOY-012", f"image {ref} is not in the Docker engine", IMAGE_HINT)
            labels = (attrs.get("Config") or {}).get("Labels") or {}
            if not labels.get(f"{L}capsule.digest") or not labels.get(f"{L}mur_version"):
                raise MurError("E-DEPLOY-012", f"image {ref} is not a mur capsule image (no {L}capsule.* labels)",
                               IMAGE_HINT)
            wrong = label_mismatch(labels, cap)
            if wrong:
                raise MurError("E-DEPLOY-012", f"image {ref} was not built from {cap.manifest_path}: "
                               + "; ".join(wrong),
                               f"deploy the manifest it was built from, or rebuild it: mur image build -m "
                               f"{cap.manifest_path} -t {ref}")
            image_id, provisional = attrs["Id"], None
        tag = image_tag(dep_id, image_id.split(":", 1)[-1])
        images.tag(image_id, *tag.rsplit(":", 1))  # image_repo names no registry port: the last colon is the tag's
        if provisional is not None:
            self.engine.untag(provisional)
        attrs = images.inspect(image_id) or {}
        cfg = attrs.get("Config") or {}
        uid, gid = image_user(str(cfg.get("User") or ""))
        labels = dict(cfg.get("Labels") or {})
        plat = platform_tag(str(attrs.get("Os") or info.get("OSType") or "linux"),
                            str(attrs.get("Architecture") or info.get("Architecture") or "x86_64"))
        version = labels.get(f"{L}mur_version", "")
        runtime = Bundle(Path(f"mur-{version}-{plat}"), version, plat, labels.get(f"{L}runtime.sha256", ""), 0, "image")
        return ImageFacts(tag, image_id, uid, gid, labels, plat), runtime

    def _load_archive(self, images: DockerEngine, path: Path) -> str:
        from mur.image.transfer import load_image

        try:
            with self.r.step(f"load {path.name} into the engine"):
                return load_image(path, self.r, images).id
        except MurError as err:
            if err.code != "E-IMG-003":
                raise
            raise MurError("E-DEPLOY-012", f"cannot deploy from the archive: {err.message}",
                           "write it with `mur image save TAG -o FILE` (one image, uncompressed layers)") from err

    def _preflight(self, info: dict[str, Any]) -> Report:
        from mur.sandbox.enclosing import unmet

        report = Report(self.engine.label, "docker")
        uid = f"{self.image.uid}:{self.image.gid}"
        report.facts.update({"platform": self.image.platform, "image": self.image.tag, "image_id": self.image.id,
                             "user": uid,
                             "init": "docker: the image's mur-serve is the container's main process (tini as PID 1)",
                             "supervisor": "docker (restart policy unless-stopped)",
                             "boot": "docker (restart policy unless-stopped)",
                             "memory_limit": self.plan.options.get("mem_limit"),
                             "pids_limit": self.plan.options.get("pids_limit"),
                             "engine_cgroup": f"v{info.get('CgroupVersion', '?')} {info.get('CgroupDriver', '')}".strip(),
                             "kernel": info.get("KernelVersion"), "base_image": self.image.labels.get(
                                 "org.opencontainers.image.base.name", self.job.req.base_image)})
        status, out = self.engine.run_once(self.image.tag, ["/usr/local/bin/mur --version; /usr/local/bin/mur probe --json"],
                                           self.plan.options, timeout=300)
        lines = out.strip().splitlines()
        got = parse_version(lines[0]) if lines else ""
        report.facts["runtime"] = {"version": got, "pinned": self.runtime.version, "sha256": self.runtime.sha256}
        report.add("runtime", got == self.runtime.version,
                   f"the image's runtime reports {got or '(nothing)'}; its label says {self.runtime.version}")
        if status != 0:
            report.add("probe", False, f"probe container exited {status}: {out.strip()[-400:]}")
            return report
        probe = parse_probe(out)
        report.probe = probe
        report.facts.update({k: probe.get(k) for k in ("landlock_abi", "seccomp", "cgroup_mode")})
        report.add("landlock", True, f"ABI {probe.get('landlock_abi')} inside the container (kernel {probe.get('kernel')})",
                   fatal=False)
        report.add("seccomp", True, "available" if probe.get("seccomp") else "unavailable", fatal=False)
        cap = self.job.capsule
        res = cap.capsule.capabilities.resources
        sessions = bool(probe.get("cgroup_delegated"))
        why = None if sessions else unmet(probe.get("enclosing"), int(res.cgroup_memory_bytes), int(res.cgroup_pids_max))
        report.facts["cgroup_sessions"] = sessions
        report.facts["aggregate_bound"] = "session-cgroup" if sessions else (
            "the container's cgroup" if why is None else "none")
        report.add("shell limits", sessions or why is None or not cap.needs_subprocess,
                   ("shell tools get a cgroup of their own" if sessions else
                    f"shell tools share the container's cgroup as their aggregate bound (memory {self.plan.options.get('mem_limit')} "
                    "bytes, RLIMIT_NPROC for tasks)" if why is None else f"shell tools cannot get aggregate limits: {why}")
                   + ("" if cap.needs_subprocess else "; the capsule has no shell/spawn grants"),
                   fatal=cap.needs_subprocess)
        containment_check(report, cap, probe)
        return report

    def service(self, name: str) -> ContainerService:
        return ContainerService(self.engine, name, self.job.dep_id)

def _tls_bytes(tls: Tls | None) -> tuple[bytes, bytes] | None:
    if tls is None:
        return None
    try:
        return Path(tls.cert.src).read_bytes(), Path(tls.key.src).read_bytes()
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot read the TLS certificate or key: {exc.strerror or exc}") from exc


def destroy_containers(engine: DockerEngine, dep_id: str) -> list[str]:
    """Remove the deployment's containers (with their volumes) and its tags; a prebuilt image keeps its own."""
    for role in ("", "prev", "candidate", "swap"):
        engine.remove(container_name(dep_id, role))
    repo = image_repo(dep_id)
    removed = []
    for _image_id, tags in engine.images(repo):
        for t in tags:
            if t.startswith(repo + ":"):
                engine.untag(t)
                removed.append(t)
    return removed




def reconcile(engine: DockerEngine, dep_id: str) -> list[str]:
    """Put the deployment's containers back in order after an interrupted command (under its lock):
    a smoke-start container goes; a serving container moved aside (`-swap`) or to `-prev` by a
    deploy or rollback that did not finish comes back under its name. Returns what was done."""
    name, prev, swap = container_name(dep_id), container_name(dep_id, "prev"), container_name(dep_id, "swap")
    done = []
    if engine.remove(container_name(dep_id, "candidate")):
        done.append("removed a smoke-start container an interrupted deploy left")
    if engine.container(swap) is not None:
        if engine.container(name) is None:
            engine.rename(swap, name)
            done.append("restored the container an interrupted rollback had moved aside")
        elif engine.container(prev) is None:
            engine.rename(swap, prev)
            done.append("finished an interrupted rollback (the old container is kept as -prev)")
        else:
            engine.remove(swap)
            done.append("removed a third container an interrupted rollback left")
    if engine.container(name) is None and engine.container(prev) is not None:
        engine.rename(prev, name)
        done.append("brought back the previous container an interrupted deploy had moved aside")
    return done


def leftovers(engine: DockerEngine, dep_id: str) -> list[str]:
    """What `reconcile` would put in order (read only)."""
    name = container_name(dep_id)
    out = [f"container {container_name(dep_id, r)}" for r in ("candidate", "swap")
           if engine.container(container_name(dep_id, r)) is not None]
    if engine.container(name) is None and engine.container(container_name(dep_id, "prev")) is not None:
        out.append(f"no {name}, only its previous container")
    return out
