"""A Docker engine as a deploy target: the capsule image built by mur.image (or a prebuilt one) run as
one container per deployment. Docker is the supervisor: the image's own entrypoint (mur-serve, i.e.
`mur run` serving A2A) is the container's main process, and the restart policy brings it back.

Container settings and why (environment.md section 6):
  * ``network_mode=host`` bound to 127.0.0.1: engines here run with ``--bridge=none``, and a
    loopback-bound service is not exposed unless ``--publish`` asks;
  * the image's non-root user, ``cap_drop=ALL``, ``no-new-privileges``, a private cgroup namespace
    whose cgroup filesystem stays read-only: nothing inside can create or leave a cgroup, so the
    container's own cgroup (``mem_limit`` / ``pids_limit``) is the shell tools' aggregate bound
    (mur.sandbox.enclosing, W-SEC-005). Never ``--privileged`` (it fails without CAP_SYS_RESOURCE);
  * the engine's default seccomp profile, which allows the Landlock syscalls on current engines
    (the preflight proves it by running the probe under the same options); ``--seccomp-profile``
    swaps in another one such as images/seccomp-landlock.json;
  * ``init=True`` (tini) reaps orphans; restart policy ``unless-stopped``: the container comes
    back after a crash of its main process, an engine restart and a reboot, but not after
    `mur deploy stop`.

The engine itself (its container operations, their E-DEPLOY-010, and the one door to the docker SDK)
is mur.engine; this module holds what a deployment names and asks of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mur.deploy.targets.base import Result, Target, loopback
from mur.engine.docker import DockerEngine
from mur.errors import MurError

BASE_IMAGE = "mur-base:bookworm"
LABEL = "dev.mur.deployment"
SECRETS_DIR = "/run/mur"  # the created container's secrets (env file, token, TLS): never in an image layer


def image_tag(dep_id: str, digest: str) -> str:
    return f"{image_repo(dep_id)}:{digest[:16]}"


def image_repo(dep_id: str) -> str:
    return f"mur-capsule-{dep_id[4:16]}"


def container_name(dep_id: str, role: str = "") -> str:
    """`mur-<id>` serving, `-prev` kept for rollback, `-candidate` smoke start, `-swap` rollback."""
    return f"mur-{dep_id}" + (f"-{role}" if role else "")


def container_options(*, seccomp_profile: str | None, memory_bytes: int, pids_max: int | None) -> dict[str, Any]:
    """The engine options of every container of a deployment (probe, smoke start, service), as data."""
    opts = ["no-new-privileges:true"]
    if seccomp_profile:
        try:
            opts.append("seccomp=" + json.dumps(json.loads(Path(seccomp_profile).read_text())))
        except (OSError, ValueError) as exc:
            raise MurError("E-DEPLOY-001", f"cannot read seccomp profile {seccomp_profile}: {exc}",
                           "--seccomp-profile takes a readable JSON file") from exc
    out: dict[str, Any] = {"network_mode": "host", "cgroupns": "private", "cap_drop": ["ALL"], "init": True,
                           "security_opt": opts, "mem_limit": memory_bytes}
    if pids_max is not None:
        out["pids_limit"] = pids_max
    return out


class ContainerTarget(Target):
    """Commands and files inside one running container (status checks, probes, logs)."""

    kind = "docker"
    error_code = "E-DEPLOY-010"

    def __init__(self, engine: DockerEngine, name: str):
        super().__init__()
        self.engine, self.name = engine, name

    @property
    def label(self) -> str:
        return f"container {self.name}"

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
        return Result(*self.engine.exec(self.name, ["/bin/sh", "-c", cmd]))

    def _put(self, src: Path | bytes, dst: str) -> None:
        try:
            data = src if isinstance(src, bytes) else Path(src).read_bytes()
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot read {src}: {exc.strerror or exc}") from exc
        self.engine.put_file(self.name, dst, data, 0o600)

    def open_port(self, port: int):
        return loopback(port)  # host network on the local engine
