"""A Docker engine as a deploy target: a capsule image (base + pinned bundle + capsule files) run as
one container per deployment, supervised by `mur supervise` inside it.

Container settings and why (environment.md section 6):
  * ``network_mode=host`` bound to 127.0.0.1: engines here run with ``--bridge=none``, and a
    loopback-bound service is not exposed unless ``--publish`` asks;
  * ``cgroupns=private`` + ``cap_add=SYS_ADMIN`` and, in the entrypoint, ``mount -o
    remount,bind,rw`` of each cgroup controller: the sandbox can then create sub-cgroups, so
    shell tools get aggregate limits. Never ``--privileged`` (it fails without CAP_SYS_RESOURCE);
  * the engine's default seccomp profile, which allows the Landlock syscalls on current engines
    (the preflight proves it by running the probe under the same options); ``--seccomp-profile``
    swaps in another one such as images/seccomp-landlock.json;
  * ``init=True`` (tini) reaps orphans; restart policy ``unless-stopped``: the container comes
    back after a crash of its main process, an engine restart and a reboot, but not after
    `mur deploy stop`. The supervisor inside does the per-service restarts with backoff.

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

# Kept byte-identical to images/capsule/Dockerfile (a unit test compares them); embedded here so an
# installed mur without the source tree can build capsule images.
CAPSULE_DOCKERFILE = """\
# The capsule image: the locally built base + the pinned mur runtime + the capsule's files.
# mur deploy --docker generates the build context (bin/, artifacts/, deployments/, entrypoint).
ARG BASE=mur-base:bookworm
FROM ${BASE}
COPY root/ /root/
COPY mur-entrypoint /usr/local/bin/mur-entrypoint
ENV HOME=/root MURMUR_A2A_TIMEOUT_SECS=0
# Unpack the single-file runtime into the image once, so a container start does not.
RUN for b in /root/.murmur/bin/mur-*; do if [ -x "$b" ]; then "$b" --version; fi; done
ENTRYPOINT ["/usr/local/bin/mur-entrypoint"]
"""

ENTRYPOINT = """\
#!/bin/sh
# Runs as the container's main process (under tini). With a private cgroup namespace and
# CAP_SYS_ADMIN the cgroup mounts are still read-only: remount each one read-write so the runtime
# can create sub-cgroups for shell tools (environment.md section 6). Never --privileged.
while read -r _src mnt fstype _rest; do
  case "$fstype" in
    cgroup) mount -o remount,bind,rw "$mnt" 2>/dev/null || echo "mur-entrypoint: cannot remount $mnt rw" >&2 ;;
    cgroup2)
      if [ "$mnt" = /sys/fs/cgroup ]; then
        mount -o remount,rw "$mnt" 2>/dev/null || echo "mur-entrypoint: cannot remount $mnt rw" >&2
        # cgroup v2 forbids controllers in a cgroup that holds processes: park ourselves in a leaf.
        mkdir -p /sys/fs/cgroup/init 2>/dev/null && echo $$ > /sys/fs/cgroup/init/cgroup.procs 2>/dev/null
      fi ;;
  esac
done < /proc/self/mounts
exec "$@"
"""


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


@dataclass(frozen=True)
class ContainerInfo:
    name: str
    status: str  # created | running | exited | dead | ...
    labels: dict[str, str]
    image_tags: tuple[str, ...]
    restart_count: int = 0
    restart_policy: str = ""


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

    def has_image(self, tag: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            self._call(f"inspect image {tag}", self.client.images.get, tag)
            return True
        except MurError as err:
            if isinstance(err.__cause__, ImageNotFound):
                return False
            raise

    def build(self, context: Path, tag: str, base: str, labels: dict[str, str]) -> None:
        """Build an image from a context directory (tar streamed, symlinks kept)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(context), arcname=".")
        buf.seek(0)
        self._call(f"build {tag}", self.client.images.build, fileobj=buf, custom_context=True, tag=tag,
                   buildargs={"BASE": base}, labels=labels, rm=True, forcerm=True, network_mode="none", pull=False)

    def run_kwargs(self, *, seccomp_profile: str | None, apparmor: bool) -> dict[str, Any]:
        opts: list[str] = []
        if seccomp_profile:
            try:
                opts.append("seccomp=" + json.dumps(json.loads(Path(seccomp_profile).read_text())))
            except (OSError, ValueError) as exc:
                raise MurError("E-DEPLOY-001", f"cannot read seccomp profile {seccomp_profile}: {exc}") from exc
        if apparmor:  # remounting cgroups needs mount(2), which docker-default AppArmor denies
            opts.append("apparmor=unconfined")
        return {"network_mode": "host", "cgroupns": "private", "cap_add": ["SYS_ADMIN"], "init": True,
                "security_opt": opts}

    def run_once(self, image: str, command: list[str], kwargs: dict[str, Any], timeout: float = 120) -> tuple[int, str]:
        """Run a throwaway container to completion; (status, combined output)."""
        c = self._call(f"create a container from {image}", self.client.containers.create, image, command=command,
                       **kwargs)
        try:
            self._call("start a probe container", c.start)
            status = self._call("wait for a probe container", c.wait, timeout=timeout).get("StatusCode", 1)
            out = self._call("read a probe container's output", c.logs, stdout=True, stderr=True)
            return int(status), out.decode("utf-8", "replace")
        finally:
            try:
                self._call("remove a probe container", c.remove, force=True)
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
        return ContainerInfo(name, c.status, dict(c.labels or {}), tags, int(attrs.get("RestartCount") or 0),
                             str((host.get("RestartPolicy") or {}).get("Name") or ""))

    def create(self, image: str, name: str, command: list[str], kwargs: dict[str, Any], labels: dict[str, str],
               files: dict[str, tuple[bytes, int]], restart: str = "unless-stopped") -> None:
        """Create a container, copy `files` (path -> (bytes, mode)) into it, start it."""
        self.remove(name)
        policy = {"Name": restart} if restart != "no" else {"Name": "no"}
        c = self._call(f"create container {name}", self.client.containers.create, image, command=command, name=name,
                       labels=labels, restart_policy=policy, **kwargs)
        for path, (data, mode) in files.items():
            self._call(f"copy {path} into {name}", c.put_archive, str(Path(path).parent), _tar_one(Path(path).name, data, mode))
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
        self._call(f"remove container {name}", c.remove, force=True)
        return True

    def rename(self, old: str, new: str) -> bool:
        c = self._get(old)
        if c is None:
            return False
        self._call(f"rename {old} -> {new}", c.rename, new)
        return True

    def wait(self, name: str, timeout: float) -> tuple[int, str]:
        """Wait for a container to exit; (status, its stdout)."""
        c = self._get(name)
        if c is None:
            return 1, ""
        status = self._call(f"wait for {name}", c.wait, timeout=timeout).get("StatusCode", 1)
        out = self._call(f"logs of {name}", c.logs, stdout=True, stderr=False)
        return int(status), out.decode("utf-8", "replace")

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

    def remove_image(self, ref: str) -> None:
        self._call(f"remove image {ref}", self.client.images.remove, ref, force=True, noprune=False)

    def logs(self, name: str, tail: int = 200, follow: bool = False, sink: Callable[[bytes], None] | None = None) -> str:
        c = self._get(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        if follow and sink is not None:
            for chunk in self._call(f"logs of {name}", c.logs, stream=True, follow=True, tail=tail):
                sink(chunk)
            return ""
        return self._call(f"logs of {name}", c.logs, tail=tail).decode("utf-8", "replace")


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
