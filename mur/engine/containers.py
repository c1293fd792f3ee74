"""The Docker engine's container operations (a Docker deploy's probe, smoke-start and service
containers): their failures are E-DEPLOY-010, chosen from the SDK door's classification
(mur.engine.sdk). They hand out plain values (`ContainerInfo`), never SDK objects.
"""

from __future__ import annotations

import io
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mur.engine.sdk import Connection, Fault
from mur.errors import MurError

PROBE = ("start a probe container", "wait for a probe container", "read a probe container's output")


def container_error(fault: Fault) -> MurError:
    """Any fault, whatever its kind: deploy reports the engine and its operations as one (E-DEPLOY-010)."""
    return MurError("E-DEPLOY-010", f"docker: {fault.what} failed: {fault.text}",
                    "is the engine running (docker info)? see docs/deploy.md")


@dataclass(frozen=True)
class Secret:
    """A file copied into a created container before it starts: owned by the image's user, 0600."""

    data: bytes
    uid: int
    gid: int
    mode: int = 0o600


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


class ContainerOps(Connection):
    """Containers in the engine, and the images a deployment tags into its own repository."""

    def _get(self, name: str) -> Any | None:
        return self.find(container_error, f"inspect container {name}", self.client.containers.get, name)

    @property
    def label(self) -> str:
        base = getattr(getattr(self.client, "api", None), "base_url", "")
        return f"docker ({base})" if base else "docker"

    def info(self) -> dict[str, Any]:
        return self.call(container_error, "info", self.client.info)

    def run_once(self, image: str, command: list[str], kwargs: dict[str, Any],
                 timeout: float = 120) -> tuple[int, str]:
        """Run a throwaway shell command in `image` (its entrypoint replaced); (status, combined output)."""
        return self.throwaway(container_error, image, command, {"entrypoint": ["/bin/sh", "-c"], **kwargs}, timeout,
                              PROBE)

    def container(self, name: str) -> ContainerInfo | None:
        c = self._get(name)
        if c is None:
            return None
        attrs = c.attrs or {}
        host = attrs.get("HostConfig") or {}
        try:
            tags = self.call(container_error, f"inspect the image of {name}", lambda: tuple(c.image.tags))
        except MurError:  # the image may be gone (removed under a stopped container)
            tags = ()
        # the name it was created from comes first: a reproducible build gives other deployments' (or an
        # image build's) tags to the same image, and "the release it runs" must not read one of those
        created = str((attrs.get("Config") or {}).get("Image") or "")
        if created in tags:
            tags = (created, *(t for t in tags if t != created))
        state = attrs.get("State") or {}
        return ContainerInfo(name, c.status, dict(c.labels or {}), tags, int(attrs.get("RestartCount") or 0),
                             str((host.get("RestartPolicy") or {}).get("Name") or ""),
                             str(state.get("StartedAt") or ""), int(state.get("ExitCode") or 0))

    def labelled(self, label: str) -> list[ContainerInfo]:
        """Every container (running or not) that carries `label`."""
        found = self.call(container_error, f"list containers labelled {label}", self.client.containers.list,
                          all=True, filters={"label": label})
        return [ContainerInfo(c.name, c.status, dict(c.labels or {}), ()) for c in found]

    def create(self, image: str, name: str, env: dict[str, str], kwargs: dict[str, Any], labels: dict[str, str],
               files: dict[str, Secret], restart: str = "unless-stopped") -> None:
        """Create a container running the image's entrypoint, copy `files` (path -> Secret) into it, start it."""
        self.remove(name)
        c = self.call(container_error, f"create container {name}", self.client.containers.create, image, name=name,
                      environment=env, labels=labels, restart_policy={"Name": restart}, **kwargs)
        if files:
            self.call(container_error, f"copy secrets into {name}", c.put_archive, "/", _secrets_tar(files))
        self.call(container_error, f"start container {name}", c.start)

    def start(self, name: str) -> bool:
        c = self._get(name)
        if c is None:
            return False
        self.call(container_error, f"start container {name}", c.start)
        return True

    def stop(self, name: str, timeout: int = 20) -> bool:
        c = self._get(name)
        if c is None:
            return False
        self.call(container_error, f"stop container {name}", c.stop, timeout=timeout)
        return True

    def remove(self, name: str, timeout: int = 20) -> bool:
        c = self._get(name)
        if c is None:
            return False
        if c.status == "running":
            self.call(container_error, f"stop container {name}", c.stop, timeout=timeout)
        # v: its anonymous /workdir volume
        self.call(container_error, f"remove container {name}", c.remove, force=True, v=True)
        return True

    def rename(self, old: str, new: str) -> bool:
        c = self._get(old)
        if c is None:
            return False
        self.call(container_error, f"rename {old} -> {new}", c.rename, new)
        return True

    def exec(self, name: str, cmd: list[str]) -> tuple[int, str, str]:
        """(exit status, stdout, stderr) of a command run in a running container."""
        c = self._get(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        res = self.call(container_error, f"exec in {name}", c.exec_run, cmd, demux=True)
        out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
        return int(res.exit_code or 0), (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")

    def put_file(self, name: str, path: str, data: bytes, mode: int) -> None:
        c = self._get(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        self.call(container_error, f"copy into {name}", c.put_archive, str(Path(path).parent),
                  _tar_one(Path(path).name, data, mode))

    def images(self, repo: str) -> list[tuple[str, tuple[str, ...]]]:
        """(id, tags) of every image of a repository."""
        found = self.call(container_error, f"list images {repo}", self.client.images.list, name=repo)
        return [(img.id, tuple(img.tags)) for img in found]

    def untag(self, ref: str) -> None:
        """Remove one tag (the image goes with its last tag): a prebuilt image keeps the operator's own tags."""
        self.call(container_error, f"remove image {ref}", self.client.images.remove, ref, noprune=False)

    def stdout_since(self, name: str, since: int) -> str:
        """The container's stdout from `since` (unix seconds) on: the runtime's startup line is there."""
        c = self._get(name)
        if c is None:
            return ""
        out = self.call(container_error, f"logs of {name}", c.logs, stdout=True, stderr=False, since=since)
        return out.decode("utf-8", "replace")

    def logs(self, name: str, tail: int = 200, follow: bool = False, sink: Callable[[bytes], None] | None = None) -> str:
        c = self._get(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        if follow and sink is not None:
            chunks = self.call(container_error, f"logs of {name}", c.logs, stream=True, follow=True, tail=tail)
            for chunk in self.each(container_error, f"logs of {name}", chunks):
                sink(chunk)
            return ""
        return self.call(container_error, f"logs of {name}", c.logs, tail=tail).decode("utf-8", "replace")


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


