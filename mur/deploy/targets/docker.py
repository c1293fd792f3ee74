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

The docker SDK is used here only: every SDK, transport and OSError becomes E-DEPLOY-010 in
`DockerEngine._call` (tests/deploy/test_deploy_errors.py checks the mapping is total), and the
engine hands out plain values (`ContainerInfo`), never SDK objects.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from mur.deploy.targets.base import Result, Target, loopback
from mur.errors import MurError

T = TypeVar("T")

BASE_IMAGE = "mur-base:bookworm"
LABEL = "dev.mur.deployment"
SECRETS_DIR = "/run/mur"  # the created container's secrets (env file, token, TLS): never in an image layer


@dataclass(frozen=True)
class Secret:
    """A file copied into a created container before it starts: owned by the image's user, 0600."""

    data: bytes
    uid: int
    gid: int
    mode: int = 0o600


def _engine_errors() -> tuple[type[BaseException], ...]:
    """Everything the SDK raises: its own classes (not all derive from DockerException, e.g.
    StreamParseError), requests' transport errors, and OSError from the socket."""
    import docker.errors
    from requests.exceptions import RequestException

    own = tuple(c for c in vars(docker.errors).values() if isinstance(c, type) and issubclass(c, Exception))
    return (*own, RequestException, OSError)


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
            raise MurError("E-DEPLOY-001", f"cannot read seccomp profile {seccomp_profile}: {exc}") from exc
    out: dict[str, Any] = {"network_mode": "host", "cgroupns": "private", "cap_drop": ["ALL"], "init": True,
                           "security_opt": opts, "mem_limit": memory_bytes}
    if pids_max is not None:
        out["pids_limit"] = pids_max
    return out


@dataclass(frozen=True)
class ContainerInfo:
    name: str
    status: str  # created | running | exited | dead | ...
    labels: dict[str, str]
    image_tags: tuple[str, ...]
    restart_count: int = 0
    restart_policy: str = ""
    started_at: str = ""  # State.StartedAt (RFC 3339): the current run's logs start there
    exit_code: int = 0  # State.ExitCode: of the last run that ended


class DockerEngine:
    """The engine (local socket or DOCKER_HOST) and the operations deploy needs from it."""

    def __init__(self, client: Any = None) -> None:
        self.client = client if client is not None else self._call("connect to the engine", _connect)

    @staticmethod
    def _call(what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """The one place an SDK call happens: its failures become E-DEPLOY-010."""
        try:
            return fn(*args, **kwargs)
        except MurError:
            raise
        except _engine_errors() as exc:
            try:
                text = getattr(exc, "explanation", None) or str(exc) or type(exc).__name__
            except Exception:  # noqa: BLE001 - an SDK exception whose message cannot be formatted
                text = type(exc).__name__
            raise MurError("E-DEPLOY-010", f"docker: {what} failed: {text}",
                           "is the engine running (docker info)? see docs/deploy.md") from exc

    def _get(self, name: str) -> Any | None:
        from docker.errors import NotFound

        try:
            return self._call(f"inspect container {name}", self.client.containers.get, name)
        except MurError as err:
            if isinstance(err.__cause__, NotFound):
                return None
            raise

    @property
    def label(self) -> str:
        base = getattr(getattr(self.client, "api", None), "base_url", "")
        return f"docker ({base})" if base else "docker"

    def info(self) -> dict[str, Any]:
        return self._call("info", self.client.info)

    def run_once(self, image: str, command: list[str], kwargs: dict[str, Any], timeout: float = 120) -> tuple[int, str]:
        """Run a throwaway shell command in `image` (its entrypoint replaced); (status, combined output)."""
        c = self._call(f"create a container from {image}", self.client.containers.create, image, command=command,
                       entrypoint=["/bin/sh", "-c"], **kwargs)
        try:
            self._call("start a probe container", c.start)
            status = self._call("wait for a probe container", c.wait, timeout=timeout).get("StatusCode", 1)
            out = self._call("read a probe container's output", c.logs, stdout=True, stderr=True)
            return int(status), out.decode("utf-8", "replace")
        finally:
            try:
                self._call("remove a probe container", c.remove, force=True, v=True)
            except MurError:
                pass  # best effort: the engine is going away anyway

    def container(self, name: str) -> ContainerInfo | None:
        c = self._get(name)
        if c is None:
            return None
        attrs = c.attrs or {}
        host = attrs.get("HostConfig") or {}
        try:
            tags = self._call(f"inspect the image of {name}", lambda: tuple(c.image.tags))
        except MurError:  # the image may be gone (removed under a stopped container)
            tags = ()
        state = attrs.get("State") or {}
        return ContainerInfo(name, c.status, dict(c.labels or {}), tags, int(attrs.get("RestartCount") or 0),
                             str((host.get("RestartPolicy") or {}).get("Name") or ""),
                             str(state.get("StartedAt") or ""), int(state.get("ExitCode") or 0))

    def labelled(self, label: str) -> list[ContainerInfo]:
        """Every container (running or not) that carries `label`."""
        found = self._call(f"list containers labelled {label}", self.client.containers.list, all=True,
                           filters={"label": label})
        return [ContainerInfo(c.name, c.status, dict(c.labels or {}), ()) for c in found]

    def create(self, image: str, name: str, env: dict[str, str], kwargs: dict[str, Any], labels: dict[str, str],
               files: dict[str, Secret], restart: str = "unless-stopped") -> None:
        """Create a container running the image's entrypoint, copy `files` (path -> Secret) into it, start it."""
        self.remove(name)
        c = self._call(f"create container {name}", self.client.containers.create, image, name=name, environment=env,
                       labels=labels, restart_policy={"Name": restart}, **kwargs)
        if files:
            self._call(f"copy secrets into {name}", c.put_archive, "/", _secrets_tar(files))
        self._call(f"start container {name}", c.start)

    def start(self, name: str) -> bool:
        c = self._get(name)
        if c is None:
            return False
        self._call(f"start container {name}", c.start)
        return True

    def stop(self, name: str, timeout: int = 20) -> bool:
        c = self._get(name)
        if c is None:
            return False
        self._call(f"stop container {name}", c.stop, timeout=timeout)
        return True

    def remove(self, name: str, timeout: int = 20) -> bool:
        c = self._get(name)
        if c is None:
            return False
        if c.status == "running":
            self._call(f"stop container {name}", c.stop, timeout=timeout)
        self._call(f"remove container {name}", c.remove, force=True, v=True)  # v: its anonymous /workdir volume
        return True

    def rename(self, old: str, new: str) -> bool:
        c = self._get(old)
        if c is None:
            return False
        self._call(f"rename {old} -> {new}", c.rename, new)
        return True

    def exec(self, name: str, cmd: list[str]) -> Result:
        c = self._get(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        res = self._call(f"exec in {name}", c.exec_run, cmd, demux=True)
        out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
        return Result(int(res.exit_code or 0), (out or b"").decode("utf-8", "replace"),
                      (err or b"").decode("utf-8", "replace"))

    def put_file(self, name: str, path: str, data: bytes, mode: int) -> None:
        c = self._get(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        self._call(f"copy into {name}", c.put_archive, str(Path(path).parent), _tar_one(Path(path).name, data, mode))

    def images(self, repo: str) -> list[tuple[str, tuple[str, ...]]]:
        """(id, tags) of every image of a repository."""
        return [(img.id, tuple(img.tags)) for img in self._call(f"list images {repo}", self.client.images.list, name=repo)]

    def untag(self, ref: str) -> None:
        """Remove one tag (the image goes with its last tag): a prebuilt image keeps the operator's own tags."""
        self._call(f"remove image {ref}", self.client.images.remove, ref, noprune=False)

    def stdout_since(self, name: str, since: int) -> str:
        """The container's stdout from `since` (unix seconds) on: the runtime's startup line is there."""
        c = self._get(name)
        if c is None:
            return ""
        return self._call(f"logs of {name}", c.logs, stdout=True, stderr=False, since=since).decode("utf-8", "replace")

    def logs(self, name: str, tail: int = 200, follow: bool = False, sink: Callable[[bytes], None] | None = None) -> str:
        c = self._get(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        if follow and sink is not None:
            for chunk in self._call(f"logs of {name}", c.logs, stream=True, follow=True, tail=tail):
                sink(chunk)
            return ""
        return self._call(f"logs of {name}", c.logs, tail=tail).decode("utf-8", "replace")


def image_engine(engine: DockerEngine) -> Any:
    """mur.image's engine (the image builder, load, tag) on the same connection: its errors are E-IMG-*."""
    from mur.image.engine import Engine

    return Engine(client=engine.client)


def _connect() -> Any:
    import docker

    client = docker.from_env(timeout=120)
    client.ping()
    return client


def _tar_one(name: str, data: bytes, mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _secrets_tar(files: dict[str, Secret]) -> bytes:
    """One archive extracted at / : each file's directory (0700, the file's owner), then the files."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs = {str(Path(p).parent).lstrip("/"): f for p, f in files.items()}
        for d, f in sorted(dirs.items()):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, 0o700, f.uid, f.gid, now
            tar.addfile(info)
        for path, f in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.uid, info.gid, info.mtime = len(f.data), f.mode, f.uid, f.gid, now
            tar.addfile(info, io.BytesIO(f.data))
    return buf.getvalue()


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
        return self.engine.exec(self.name, ["/bin/sh", "-c", cmd])

    def _put(self, src: Path | bytes, dst: str) -> None:
        try:
            data = src if isinstance(src, bytes) else Path(src).read_bytes()
        except OSError as exc:
            raise MurError("E-IO-003", f"cannot read {src}: {exc.strerror or exc}") from exc
        self.engine.put_file(self.name, dst, data, 0o600)

    def open_port(self, port: int):
        return loopback(port)  # host network on the local engine
