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
  * ``init=True`` (tini) reaps orphans; restart policy ``on-failure`` as an outer net around the
    supervisor, which does the per-service restarts with backoff.
"""

from __future__ import annotations

import io
import json
import shlex
import tarfile
import time
from pathlib import Path
from typing import Any, Callable

from mur.deploy.targets.base import Result, Target
from mur.errors import MurError

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


def _client():
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as exc:  # pragma: no cover - docker is a runtime dependency
        raise MurError("E-DEPLOY-010", "the docker Python SDK is not installed") from exc
    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except DockerException as exc:
        raise MurError("E-DEPLOY-010", f"Docker engine unavailable: {exc}",
                       "start dockerd (see docs/deploy.md) or set DOCKER_HOST") from exc


def _docker_error(what: str, exc: Exception) -> MurError:
    text = getattr(exc, "explanation", None) or str(exc)
    return MurError("E-DEPLOY-010", f"docker: {what} failed: {text}")


def image_tag(dep_id: str, digest: str) -> str:
    return f"mur-capsule-{dep_id[4:16]}:{digest[:16]}"


def container_name(dep_id: str, candidate: bool = False) -> str:
    return f"mur-{dep_id}" + ("-candidate" if candidate else "")


class DockerEngine:
    """The engine (local socket or DOCKER_HOST) and the operations deploy needs from it."""

    def __init__(self) -> None:
        self.client = _client()

    @property
    def label(self) -> str:
        try:
            return f"docker ({self.client.api.base_url})"
        except Exception:  # noqa: BLE001
            return "docker"

    def info(self) -> dict[str, Any]:
        try:
            return self.client.info()
        except Exception as exc:  # noqa: BLE001 - docker.errors.* and transport errors alike
            raise _docker_error("info", exc) from exc

    def has_image(self, tag: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            self.client.images.get(tag)
            return True
        except ImageNotFound:
            return False
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"inspect image {tag}", exc) from exc

    def build(self, context: Path, tag: str, base: str, labels: dict[str, str]) -> None:
        """Build the capsule image from a context directory (tar streamed, symlinks kept)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(context), arcname=".")
        buf.seek(0)
        try:
            self.client.images.build(fileobj=buf, custom_context=True, tag=tag, buildargs={"BASE": base},
                                     labels=labels, rm=True, forcerm=True, network_mode="none", pull=False)
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"build {tag}", exc) from exc

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
        try:
            c = self.client.containers.create(image, command=command, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"create probe container from {image}", exc) from exc
        try:
            c.start()
            status = c.wait(timeout=timeout).get("StatusCode", 1)
            out = c.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            return int(status), out
        except Exception as exc:  # noqa: BLE001
            raise _docker_error("probe container", exc) from exc
        finally:
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - best-effort cleanup
                pass

    def container(self, name: str):
        from docker.errors import NotFound

        try:
            return self.client.containers.get(name)
        except NotFound:
            return None
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"inspect container {name}", exc) from exc

    def create(self, image: str, name: str, command: list[str], kwargs: dict[str, Any], labels: dict[str, str],
               files: dict[str, tuple[bytes, int]], restart: bool = True):
        """Create a container, copy `files` (path -> (bytes, mode)) into it, start it."""
        old = self.container(name)
        if old is not None:
            self.remove(name)
        try:
            policy = {"Name": "on-failure", "MaximumRetryCount": 0} if restart else {"Name": "no"}
            c = self.client.containers.create(image, command=command, name=name, labels=labels,
                                              restart_policy=policy, **kwargs)
            for path, (data, mode) in files.items():
                c.put_archive(str(Path(path).parent), _tar_one(Path(path).name, data, mode))
            c.start()
            return c
        except MurError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"start container {name}", exc) from exc

    def remove(self, name: str, timeout: int = 20) -> bool:
        c = self.container(name)
        if c is None:
            return False
        try:
            if c.status == "running":
                c.stop(timeout=timeout)
            c.remove(force=True)
            return True
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"remove container {name}", exc) from exc

    def stop(self, name: str, timeout: int = 20) -> bool:
        c = self.container(name)
        if c is None:
            return False
        try:
            c.stop(timeout=timeout)
            return True
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"stop container {name}", exc) from exc

    def remove_images(self, repo: str) -> list[str]:
        removed = []
        try:
            for img in self.client.images.list(name=repo):
                for tag in img.tags:
                    self.client.images.remove(tag, force=True, noprune=False)
                    removed.append(tag)
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"remove images {repo}", exc) from exc
        return removed

    def logs(self, name: str, tail: int = 200, follow: bool = False, sink: Callable[[bytes], None] | None = None) -> str:
        c = self.container(name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {name} does not exist")
        try:
            if follow and sink is not None:
                for chunk in c.logs(stream=True, follow=True, tail=tail):
                    sink(chunk)
                return ""
            return c.logs(tail=tail).decode("utf-8", "replace")
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"logs of {name}", exc) from exc


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

    def _container(self):
        c = self.engine.container(self.name)
        if c is None:
            raise MurError("E-DEPLOY-010", f"container {self.name} does not exist")
        return c

    def _exec(self, cmd: str, timeout: float | None, stdin: bytes | None) -> Result:
        try:
            res = self._container().exec_run(["/bin/sh", "-c", cmd], demux=True)
        except MurError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"exec in {self.name}", exc) from exc
        out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
        return Result(int(res.exit_code or 0), (out or b"").decode("utf-8", "replace"),
                      (err or b"").decode("utf-8", "replace"))

    def _put(self, src: Path | bytes, dst: str) -> None:
        data = src if isinstance(src, bytes) else Path(src).read_bytes()
        try:
            self._container().put_archive(str(Path(dst).parent), _tar_one(Path(dst).name, data, 0o600))
        except Exception as exc:  # noqa: BLE001
            raise _docker_error(f"copy into {self.name}", exc) from exc

    def _get(self, path: str) -> bytes:
        res = self.run(f"cat {shlex.quote(path)}", what=f"read {path}")
        return res.stdout.encode()
