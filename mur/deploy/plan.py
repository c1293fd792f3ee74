"""Deploy plans as data: what to create, upload, write and run on a target, and in which phase.

Everything here is pure (inputs -> frozen steps), so tests assert plans as data and the executor
(``mur.deploy.apply``) is the only place that touches a machine. Remote layout, all under the
target user's own home (never a hard-coded /root)::

    ~/.murmur/bin/mur-<version>-<platform>            pinned runtime, shared by deployments
    ~/.murmur/bin/.refs/<bundle>/<dep_id>             who uses it (destroy and gc remove unused ones)
    ~/.murmur/artifacts/<name>/<version>/...          the target's global artifact store
    ~/.murmur/locks/<dep_id>.lock, .holder            the deployment's lock and who holds it (mur.deploy.lock)
    ~/.murmur/staging/<dep_id>/release-<n>-<nonce>/   a release being built (never served)
    ~/.murmur/staging/<dep_id>/shared-<nonce>/        shared files being copied, renamed into place
    ~/.murmur/deployments/<dep_id>/releases/<n>/      a complete release: murmur.yaml, referenced files,
                                                      work/ (the tools' workdir, seeded), workdir/ (session
                                                      records), env, a2a-token, tls/ (0600), mur -> the
                                                      bundle, service.json, prestart.sh, the unit, and
                                                      release.json, written last
    ~/.murmur/deployments/<dep_id>/current            symlink to the serving release
    ~/.murmur/deployments/<dep_id>/run/ logs/ tmp/    supervisor pid/state, service log, TMPDIR

A release is built in staging, its release.json written last, every file fsynced, and only then
renamed to releases/<n> (`commit_command`): a directory under releases/ is always complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from mur.deploy.env import render_env_file
from mur.deploy.init import init_for
from mur.deploy.init.service import prestart_script, service_env
from mur.deploy.init.supervisor import boot_script
from mur.deploy.init.systemd import render_unit
from mur.deploy.runline import TOOLS_WORKDIR
from mur.deploy.steps import (
    BundleRef, FileRef, Layout, Mkdir, Run, ServiceConfig, Step, Symlink, Tls, Upload, WriteFile,
)
from mur.errors import MurError
from mur.resolve.shipped import ArtifactRef, capsule_digest, digest_of

KEEP_RELEASES = 5
# below Linux's ephemeral range (ip_local_port_range 32768-60999): a derived port is never taken by
# an outbound connection's source port while the service restarts
PORT_RANGE = (20000, 32768)
PORTS_ENV = "MUR_DEPLOY_PORTS"


def port_range(env: "os._Environ[str] | dict[str, str]" = os.environ) -> tuple[int, int]:
    """Where derived ports are picked: PORT_RANGE, or `MUR_DEPLOY_PORTS=LO-HI` (inclusive), e.g. the
    ports a firewall opens, or disjoint ranges for deploys that share one network namespace."""
    raw = env.get(PORTS_ENV, "").strip()
    if not raw:
        return PORT_RANGE
    m = re.fullmatch(r"(\d+)\s*-\s*(\d+)", raw)
    lo, hi = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    if not m or not 1024 <= lo < hi <= 65535:
        raise MurError("E-DEPLOY-001", f"{PORTS_ENV}={raw!r} is not a port range LO-HI (1024 <= LO < HI <= 65535)",
                       f"e.g. {PORTS_ENV}={PORT_RANGE[0]}-{PORT_RANGE[1] - 1} (the default); keep it below 32768, "
                       "Linux's ephemeral ports, or a restarting service can find its port taken")
    return lo, hi + 1


@dataclass(frozen=True)
class ReleaseInputs:
    dep_id: str
    home: str
    n: int
    bundle: BundleRef
    manifest: FileRef
    files: tuple[FileRef, ...] = ()
    workdir: tuple[FileRef, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()
    service: ServiceConfig = field(default_factory=lambda: ServiceConfig(port=0))
    sudo: bool = False  # the deploy user is not root: privileged steps go through `sudo -n`
    prev_n: int | None = None  # the serving release, whose unchanged files are linked, not uploaded
    precompiled: tuple[FileRef, ...] = ()  # compiled components for the target's engine cache
    capsule_name: str = ""
    capsule_version: str = ""
    token: bytes = b""  # the deployment's A2A bearer token (written 0600, never part of a digest)
    tls: Tls | None = None
    nonce: str = "0"  # this deploy attempt: names its staging, marks the release it committed


@dataclass(frozen=True)
class ReleasePlan:
    layout: Layout
    release_dir: str
    digest: str
    capsule_digest: str
    config_digest: str
    stage_dir: str
    prepare: tuple[Step, ...]
    commit: Run
    activate: tuple[Step, ...]
    service_spec: dict[str, Any]
    release_meta: dict[str, Any]


# --- ports ------------------------------------------------------------------------------------


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Ports in LISTEN state from the text of /proc/net/tcp and /proc/net/tcp6."""
    ports: set[int] = set()
    for line in proc_net_tcp.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[3] != "0A":
            continue
        try:
            ports.add(int(parts[1].rsplit(":", 1)[1], 16))
        except (IndexError, ValueError):
            continue
    return ports


LISTENING_COMMAND = "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true"


def pick_port(dep_id: str, busy: set[int], salt: int = 0) -> int:
    """A stable port for a deployment: derived from its id, skipping ports already listening."""
    lo, hi = port_range()
    span = hi - lo
    start = int(hashlib.sha256(f"{dep_id}:{salt}".encode()).hexdigest(), 16) % span
    for i in range(span):
        port = lo + (start + i) % span
        if port not in busy:
            return port
    raise MurError("E-DEPLOY-007", f"no free TCP port on the target in {lo}-{hi - 1}",
                   f"free one, declare network.internal_port, or widen {PORTS_ENV}")


def choose_port(dep_id: str, internal_port: int | None, recorded: int | None, busy: set[int], where: str) -> int:
    """The service port: network.internal_port when declared (a changed one is honoured on a
    redeploy), else the recorded one (stable across redeploys), else a free derived one."""
    if internal_port:
        if internal_port in busy and internal_port != recorded:
            raise MurError("E-DEPLOY-007", f"network.internal_port {internal_port} is already in use on {where}",
                           "free the port or change network.internal_port")
        return int(internal_port)
    if recorded:
        return int(recorded)
    return pick_port(dep_id, busy)


# --- the release ------------------------------------------------------------------------------


def workdir_digest(seed: tuple[FileRef, ...]) -> str:
    return digest_of(sorted((f.rel, f.sha256, f.mode) for f in seed))


def config_digest(inp: ReleaseInputs) -> str:
    """How it runs: service settings and the environment (values hashed, never stored)."""
    s = inp.service
    token = hashlib.sha256(inp.token).hexdigest() if inp.token else ""  # a new token is a new release
    return digest_of({"token": token, "port": s.port, "bind": s.bind, "restart": s.restart, "init": s.init, "user": s.user,
                    "memory": s.memory_bytes, "tasks": s.tasks_max, "env": sorted(s.env), "args": list(s.run_args),
                    "sessions": s.keep_sessions, "boot": s.boot, "tls": s.tls_pin})


def release_digest(inp: ReleaseInputs) -> str:
    return digest_of({"bundle": inp.bundle.sha256, "capsule": capsule_digest(inp), "workdir": workdir_digest(inp.workdir),
                    "config": config_digest(inp)})


def service_spec(lay: Layout, release_dir: str, svc: ServiceConfig, release: str = "") -> dict[str, Any]:
    """What `mur supervise` runs. `release_dir` is where it starts (through `current`: the supervisor
    resolves it once when it starts, and restarts that release only); `release` is the release's
    own directory, whose material (token, certificate) the service reads."""
    return {
        "deployment_id": lay.dep_id,
        "release_dir": release_dir,
        "port": svc.port,
        "bind": svc.bind,
        "restart": svc.restart,
        "user": svc.user,
        "home": lay.home,
        "run_dir": lay.run_dir,
        "log_file": lay.log_file,
        "env": service_env(lay, svc, release or release_dir),
        "cgroup": {"name": lay.dep_id, "memory_bytes": svc.memory_bytes, "pids_max": svc.tasks_max},
        "run_args": list(svc.run_args),
    }


def plan_release(inp: ReleaseInputs) -> ReleasePlan:
    """Every step of putting one release on a target, up to (not including) starting it.

    `prepare` builds it in staging (shared files through a scratch directory, renamed into place);
    `commit` makes it a release; `activate` switches `current` to it and restarts the service."""
    lay = Layout(inp.home, inp.dep_id)
    final = lay.release(inp.n)
    stage = lay.stage(inp.n, inp.nonce)
    scratch = lay.scratch(inp.nonce)
    svc = inp.service
    steps: list[Step] = [
        Mkdir(lay.bin_dir, 0o755), Mkdir(f"{lay.bin_dir}/.refs/{inp.bundle.name}", 0o755),
        Mkdir(lay.root, 0o700), Mkdir(lay.releases, 0o700), Mkdir(lay.run_dir, 0o700), Mkdir(lay.log_dir, 0o700),
        Mkdir(lay.tmp_dir, 0o700), Mkdir(lay.staging, 0o700), Mkdir(scratch, 0o700), Mkdir(stage, 0o755),
        Mkdir(f"{stage}/workdir", 0o755), Mkdir(f"{stage}/{TOOLS_WORKDIR}", 0o755),
    ]
    steps.append(Upload(inp.bundle.src, lay.bundle(inp.bundle.name), 0o755, inp.bundle.sha256,
                        inp.bundle.size, refs=lay.bundle_refs(inp.bundle.name), scratch=scratch))
    for a in inp.artifacts:
        adir = lay.artifact_dir(a.name, a.version)
        steps.append(Mkdir(adir, 0o755))
        for f in a.files:
            steps.append(Upload(f.src, f"{adir}/{f.rel}", 0o644, f.sha256, f.size, refs=f"{adir}/.refs", scratch=scratch))
    if inp.precompiled:
        steps.append(Mkdir(lay.wasm_cache, 0o700))
        for f in inp.precompiled:
            steps.append(Upload(f.src, f"{lay.wasm_cache}/{f.rel}", 0o600, f.sha256, f.size,
                                refs=f"{lay.wasm_cache}/.refs/{f.rel}", scratch=scratch))
    dirs = sorted({str(f.rel).rsplit("/", 1)[0] for f in inp.files if "/" in str(f.rel)})
    dirs += sorted({f"{TOOLS_WORKDIR}/" + str(f.rel).rsplit("/", 1)[0] for f in inp.workdir if "/" in str(f.rel)})
    steps += [Mkdir(f"{stage}/{d}", 0o755) for d in dirs]
    prev = lay.release(inp.prev_n) if inp.prev_n is not None and inp.prev_n != inp.n else None

    def alt(path: str) -> str | None:
        return f"{prev}/{path}" if prev else None

    steps.append(Upload(inp.manifest.src, f"{stage}/murmur.yaml", 0o644, inp.manifest.sha256, inp.manifest.size,
                        alt=alt("murmur.yaml")))
    for f in inp.files:
        steps.append(Upload(f.src, f"{stage}/{f.rel}", f.mode, f.sha256, f.size, alt=alt(str(f.rel))))
    for f in inp.workdir:
        steps.append(Upload(f.src, f"{stage}/{TOOLS_WORKDIR}/{f.rel}", f.mode, f.sha256, f.size,
                            alt=alt(f"{TOOLS_WORKDIR}/{f.rel}")))
    # the release's own material (private from the first byte), read by it alone
    steps.append(WriteFile(f"{stage}/env", render_env_file(svc.env), 0o600))
    if inp.token:
        steps.append(WriteFile(lay.token_file(stage), inp.token, 0o600))
    if inp.tls is not None:
        steps.append(Mkdir(f"{stage}/tls", 0o700))
        steps.append(Upload(inp.tls.cert.src, lay.tls_cert(stage), 0o644, inp.tls.cert.sha256, inp.tls.cert.size,
                            alt=alt("tls/cert.pem")))
        steps.append(Upload(inp.tls.key.src, lay.tls_key(stage), 0o600, inp.tls.key.sha256, inp.tls.key.size,
                            alt=alt("tls/key.pem")))
    steps.append(Symlink(lay.bundle(inp.bundle.name), f"{stage}/mur"))
    spec = service_spec(lay, lay.current, svc, final)
    steps.append(WriteFile(f"{stage}/service.json", (json.dumps(spec, indent=2) + "\n").encode(), 0o644))
    steps.append(WriteFile(f"{stage}/prestart.sh", prestart_script(lay, svc.keep_sessions).encode(), 0o755))
    steps.append(WriteFile(f"{stage}/{lay.unit_name}",
                           render_unit(lay, svc, capsule=inp.capsule_name, release=final).encode(), 0o644))
    if svc.boot == "cron":
        steps.append(WriteFile(lay.boot_script, boot_script(lay, inp.sudo), 0o755))
    digest = release_digest(inp)
    meta = {
        "n": inp.n, "digest": digest, "capsule_digest": capsule_digest(inp), "config_digest": config_digest(inp),
        "bundle": inp.bundle.name, "bundle_version": inp.bundle.version, "bundle_sha256": inp.bundle.sha256,
        "capsule": {"name": inp.capsule_name, "version": inp.capsule_version},
        "artifacts": [{"name": a.name, "version": a.version, "sha256": a.sha256} for a in inp.artifacts],
        "precompiled": [f.rel for f in inp.precompiled],
        "port": svc.port, "init": svc.init, "restart": svc.restart, "nonce": inp.nonce,
        "tls_pin": svc.tls_pin or None,  # the certificate this release serves (clients pin it)
    }
    steps.append(WriteFile(f"{stage}/release.json", (json.dumps(meta, indent=2) + "\n").encode(), 0o644))
    return ReleasePlan(
        layout=lay, release_dir=final, digest=digest, capsule_digest=meta["capsule_digest"],
        config_digest=meta["config_digest"], stage_dir=stage, prepare=tuple(steps),
        commit=Run(commit_command(stage, final, scratch), label=f"commit release {inp.n}"),
        activate=tuple(activate_steps(lay, inp.n, svc, inp.sudo)), service_spec=spec, release_meta=meta,
    )


def commit_command(stage: str, final: str, scratch: str = "") -> str:
    """Make a staged release a release: fsync every file (release.json was written last), then
    rename the directory into releases/ (atomic: it is there complete, or not at all). The
    deploy's scratch directory (shared files were renamed out of it) goes too."""
    q = shlex.quote
    parent = final.rsplit("/", 1)[0]
    staging = stage.rsplit("/", 1)[0]
    tidy = f" && rm -rf {q(scratch)}" if scratch else ""
    # the staging directories go when nothing else is in them: an interrupted deploy from here on
    # leaves nothing in staging
    tidy += f" && {{ rmdir {q(staging)} {q(staging.rsplit('/', 1)[0])} 2>/dev/null; true; }}"
    return (f"test -f {q(stage + '/release.json')} && find {q(stage)} -type f -exec sync -- {{}} + && "
            f"sync -- {q(stage)} && mv -T {q(stage)} {q(final)} && sync -- {q(parent)}{tidy}")


def artifact_verify_command(lay: Layout, artifacts: tuple[ArtifactRef, ...]) -> str | None:
    """One command checking every uploaded artifact zip against its digest on the target."""
    lines = [f"{a.sha256}  {lay.artifact_dir(a.name, a.version)}/{a.zip_name}" for a in artifacts]
    if not lines:
        return None
    return f"printf '%s\\n' {' '.join(shlex.quote(x) for x in lines)} | sha256sum -c --quiet -"


def activate_steps(lay: Layout, n: int, svc: ServiceConfig, sudo: bool, restart: bool = True) -> list[Step]:
    """Switch `current` to release n and (re)start the service from it (one remote command where the
    init system allows: InitSystem.start), keep it across reboots."""
    init = init_for(svc.init)
    return [*init.start(lay, sudo, restart=restart, switch=f"releases/{n}"), *init.install_boot(lay, svc, sudo)]
