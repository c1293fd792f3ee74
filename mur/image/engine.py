"""The Docker engine, for images only: the one place `mur image` calls the docker SDK.

Every SDK or transport error is translated here, once: an engine that is not there or fails an
operation is E-IMG-001, a missing image E-IMG-003, a registry that refuses a push or pull E-IMG-002
(with what the registry said, and a hint for the usual causes).
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterator

from mur.errors import MurError
from mur.image.reference import parse_ref

Note = Callable[[str], None]


@dataclass(frozen=True)
class BaseImage:
    """What a capsule image takes from its base: layers, config, users."""

    ref: str
    id: str
    diff_ids: tuple[str, ...]
    config: dict[str, Any]  # Env, Architecture, Os
    repo_digest: str
    passwd: str
    group: str


def _registry_hint(text: str) -> str:
    low = text.lower()
    if "auth" in low or "unauthorized" in low or "denied" in low:
        return "the registry wants credentials: `docker login HOST:PORT` (mur pushes with the Docker client's login)"
    if "unsupported" in low or "read-only" in low or "readonly" in low or "405" in low:
        return "the registry does not accept pushes (read-only or maintenance mode); push elsewhere"
    if "connection refused" in low or "no such host" in low or "timeout" in low or "dial tcp" in low:
        return "nothing answers at that registry address; check HOST:PORT in the tag"
    if "http response to https client" in low:
        return "the registry speaks plain HTTP: add it to the engine's insecure-registries (loopback is allowed)"
    return "check the registry address and your `docker login`"


def _explain(exc: Exception) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    return str(text).strip() or type(exc).__name__


class Engine:
    """A Docker engine (the local socket or DOCKER_HOST)."""

    def __init__(self, client: Any = None) -> None:
        if client is None:
            try:
                import docker

                client = docker.from_env(timeout=600)
                client.ping()
            except Exception as exc:  # noqa: BLE001 - DockerException, transport errors: one message
                raise MurError("E-IMG-001", f"Docker engine unavailable: {_explain(exc)}",
                               "start dockerd (docs/deploy.md, Docker) or set DOCKER_HOST") from exc
        self.client = client

    def _fail(self, what: str, exc: Exception) -> MurError:
        from docker.errors import ImageNotFound, NotFound

        if isinstance(exc, (ImageNotFound, NotFound)):
            return MurError("E-IMG-003", f"{what}: {_explain(exc)}")
        return MurError("E-IMG-001", f"docker: {what} failed: {_explain(exc)}")

    def inspect(self, ref: str) -> dict[str, Any] | None:
        """The image's inspect data, or None when the engine has no such image."""
        from docker.errors import ImageNotFound

        try:
            return self.client.api.inspect_image(ref)
        except ImageNotFound:
            return None
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"inspect image {ref}", exc) from exc

    def base(self, ref: str) -> BaseImage:
        attrs = self.inspect(ref)
        if attrs is None:
            raise MurError("E-IMG-003", f"base image {ref} is not present in the engine",
                           "build it with images/build-base.sh (mur-base:bookworm; no registry is needed)")
        passwd, group = self._etc(attrs["Id"], ("passwd", "group"))
        digests = attrs.get("RepoDigests") or []
        return BaseImage(ref=ref, id=attrs["Id"], diff_ids=tuple(attrs["RootFS"]["Layers"]),
                         config={"Env": (attrs.get("Config") or {}).get("Env") or [],
                                 "Architecture": attrs.get("Architecture"), "Os": attrs.get("Os")},
                         repo_digest=digests[0].split("@", 1)[1] if digests else "", passwd=passwd, group=group)

    def _etc(self, image: str, names: tuple[str, ...]) -> tuple[str, ...]:
        """Files of /etc read from a created (never started) container."""
        try:
            c = self.client.containers.create(image, command=["/bin/true"], network_mode="none")
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"read /etc from {image}", exc) from exc
        try:
            out = []
            for name in names:
                try:
                    stream, _ = c.get_archive(f"/etc/{name}")
                except Exception:  # noqa: BLE001 - a base without the file: start from nothing
                    out.append("")
                    continue
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    member = tar.extractfile(name)
                    out.append(member.read().decode("utf-8", "replace") if member else "")
            return tuple(out)
        finally:
            _discard(c)

    def load(self, archive: BinaryIO) -> list[str]:
        """`docker load` an archive; returns what the engine reports loading."""
        try:
            out = []
            for chunk in self.client.api.load_image(archive):
                if "error" in chunk:
                    raise MurError("E-IMG-001", f"docker load failed: {chunk['error']}")
                if "stream" in chunk:
                    out.append(chunk["stream"].strip())
            return out
        except MurError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise self._fail("docker load", exc) from exc

    def tag(self, image_id: str, ref: str) -> None:
        repo, tag = split_ref(ref)
        try:
            self.client.api.tag(image_id, repo, tag, force=True)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"tag {ref}", exc) from exc

    def save(self, ref: str) -> Iterator[bytes]:
        """`docker save` of one image, as a stream of chunks."""
        try:
            return iter(self.client.api.get_image(ref, chunk_size=1 << 20))
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"save {ref}", exc) from exc

    def remove(self, ref: str) -> None:
        from docker.errors import ImageNotFound

        try:
            self.client.api.remove_image(ref, force=True)
        except ImageNotFound:
            pass
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"remove {ref}", exc) from exc

    def _registry_stream(self, what: str, ref: str, chunks: Iterator[dict[str, Any]], note: Note | None) -> str:
        """Follow a push/pull progress stream; the manifest digest it reports, or E-IMG-002."""
        digest = ""
        try:
            for chunk in chunks:
                if chunk.get("error"):
                    text = chunk["error"]
                    raise MurError("E-IMG-002", f"{what} {ref} refused: {text}", _registry_hint(text))
                aux = chunk.get("aux") or {}
                digest = aux.get("Digest") or digest
                status = str(chunk.get("status") or "")
                if status.startswith("Digest: "):
                    digest = status.split(" ", 1)[1].strip()
                if note and status and "id" not in chunk:
                    note(status)
        except MurError:
            raise
        except Exception as exc:  # noqa: BLE001
            text = _explain(exc)
            raise MurError("E-IMG-002", f"{what} {ref} failed: {text}", _registry_hint(text)) from exc
        return digest

    def push(self, ref: str, note: Note | None = None) -> str:
        return self._transfer("push", ref, note)

    def pull(self, ref: str, note: Note | None = None) -> str:
        return self._transfer("pull", ref, note)

    def _transfer(self, what: str, ref: str, note: Note | None) -> str:
        repo, tag = split_ref(ref)
        try:
            chunks = getattr(self.client.api, what)(repo, tag=tag, stream=True, decode=True)
        except Exception as exc:  # noqa: BLE001
            text = _explain(exc)
            raise MurError("E-IMG-002", f"{what} {ref} failed: {text}", _registry_hint(text)) from exc
        return self._registry_stream(what, ref, chunks, note)

    def run(self, image: str, command: list[str], **kwargs: Any) -> tuple[int, str]:
        """Run a throwaway container to completion: (exit status, combined output)."""
        try:
            c = self.client.containers.create(image, command=command, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"create a container from {image}", exc) from exc
        try:
            c.start()
            status = int(c.wait(timeout=300).get("StatusCode", 1))
            return status, c.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        except Exception as exc:  # noqa: BLE001
            raise self._fail(f"run {image}", exc) from exc
        finally:
            _discard(c)


def _discard(container: Any) -> None:
    """Remove a throwaway container with its anonymous volumes: a capsule image declares /workdir a
    volume, and without v=True every build's runtime check left one behind."""
    try:
        container.remove(force=True, v=True)
    except Exception:  # noqa: BLE001 - best-effort cleanup
        pass


def split_ref(ref: str) -> tuple[str, str]:
    r = parse_ref(ref)
    return r.repository, r.tag
