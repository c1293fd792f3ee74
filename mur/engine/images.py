"""The Docker engine's image operations (`mur image`, `mur export`, and the image a Docker deploy builds).

Their failures are E-IMG-*, chosen from the SDK door's classification (mur.engine.sdk): an engine that
is not there or fails an operation is E-IMG-001, a missing image E-IMG-003, a registry that refuses a
push or pull E-IMG-002 (with what the registry said, and a hint for the usual causes).
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Iterator

from mur.engine.sdk import Connection, Fault, Kind
from mur.errors import MurError

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


def image_error(fault: Fault) -> MurError:
    if fault.kind is Kind.UNAVAILABLE:
        return MurError("E-IMG-001", f"Docker engine unavailable: {fault.text}",
                        "start dockerd (docs/deploy.md, Docker) or set DOCKER_HOST")
    if fault.kind is Kind.MISSING:
        return MurError("E-IMG-003", f"{fault.what}: {fault.text}")
    return MurError("E-IMG-001", f"docker: {fault.what} failed: {fault.text}")


def registry_error(fault: Fault) -> MurError:
    """A push or pull that failed, whatever the kind: the registry (or the way to it) is the usual cause."""
    return MurError("E-IMG-002", f"{fault.what} failed: {fault.text}", registry_hint(fault.text))


def registry_hint(text: str) -> str:
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


class ImageOps(Connection):
    """Images in the engine: inspect, base, load, tag, save, remove_image, push, pull, run."""

    def inspect(self, ref: str) -> dict[str, Any] | None:
        """The image's inspect data, or None when the engine has no such image."""
        return self.find(image_error, f"inspect image {ref}", self.client.api.inspect_image, ref)

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
        what = f"read /etc from {image}"
        c = self.call(image_error, what, self.client.containers.create, image, command=["/bin/true"],
                      network_mode="none")
        try:
            out = []
            for name in names:
                try:
                    stream, _ = self.call(image_error, what, c.get_archive, f"/etc/{name}")
                except MurError:  # a base without the file: start from nothing
                    out.append("")
                    continue
                with tarfile.open(fileobj=io.BytesIO(b"".join(self.each(image_error, what, stream)))) as tar:
                    member = tar.extractfile(name)
                    out.append(member.read().decode("utf-8", "replace") if member else "")
            return tuple(out)
        finally:
            self.discard(c)

    def load(self, archive: BinaryIO) -> list[str]:
        """`docker load` an archive; returns what the engine reports loading."""
        out = []
        chunks = self.call(image_error, "docker load", self.client.api.load_image, archive)
        for chunk in self.each(image_error, "docker load", chunks):
            if "error" in chunk:
                raise MurError("E-IMG-001", f"docker load failed: {chunk['error']}")
            if "stream" in chunk:
                out.append(chunk["stream"].strip())
        return out

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        self.call(image_error, f"tag {repository}:{tag}", self.client.api.tag, image_id, repository, tag, force=True)

    def save(self, ref: str) -> Iterator[bytes]:
        """`docker save` of one image, as a stream of chunks."""
        chunks = self.call(image_error, f"save {ref}", self.client.api.get_image, ref, chunk_size=1 << 20)
        return self.each(image_error, f"save {ref}", chunks)

    def remove_image(self, ref: str) -> None:
        """Remove an image (gone already is fine)."""
        self.find(image_error, f"remove {ref}", self.client.api.remove_image, ref, force=True)

    def push(self, repository: str, tag: str, note: Note | None = None) -> str:
        """Push to the registry the repository names; the manifest digest the registry reports."""
        return self._transfer("push", repository, tag, note)

    def pull(self, repository: str, tag: str, note: Note | None = None) -> str:
        return self._transfer("pull", repository, tag, note)

    def _transfer(self, verb: str, repository: str, tag: str, note: Note | None) -> str:
        """Follow a push/pull progress stream; the manifest digest it reports, or E-IMG-002."""
        what = f"{verb} {repository}:{tag}"
        chunks = self.call(registry_error, what, getattr(self.client.api, verb), repository, tag=tag, stream=True,
                           decode=True)
        digest = ""
        for chunk in self.each(registry_error, what, chunks):
            if chunk.get("error"):
                text = chunk["error"]
                raise MurError("E-IMG-002", f"{what} refused: {text}", registry_hint(text))
            aux = chunk.get("aux") or {}
            digest = aux.get("Digest") or digest
            status = str(chunk.get("status") or "")
            if status.startswith("Digest: "):
                digest = status.split(" ", 1)[1].strip()
            if note and status and "id" not in chunk:
                note(status)
        return digest

    def run(self, image: str, command: list[str], **kwargs: Any) -> tuple[int, str]:
        """Run a throwaway container to completion: (exit status, combined output)."""
        return self.throwaway(image_error, image, command, kwargs, 300, (f"run {image}",) * 3)
