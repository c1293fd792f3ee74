"""Moving images: `mur image push` to a registry, `mur image save` to an OCI archive, loading it back.

The archive is for air-gapped hosts: `mur image save TAG -o FILE` here, copy FILE, then
`docker load -i FILE` (or `load_image`, which `mur deploy --docker` uses) on the target engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.image.archive import read_saved, write_archive
from mur.engine.docker import DockerEngine
from mur.image.reference import parse_ref
from mur.image.types import QUIET, ImageRef, Reporter


@dataclass(frozen=True)
class SavedArchive:
    path: Path
    image: ImageRef
    manifest_digest: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "tag": self.image.tag, "id": self.image.id,
                "manifest_digest": self.manifest_digest, "size": self.size}


def _present(engine: DockerEngine, tag: str) -> dict[str, Any]:
    attrs = engine.inspect(tag)
    if attrs is None:
        raise MurError("E-IMG-003", f"image {tag} is not in the engine",
                       f"build it first: mur image build -t {tag}")
    return attrs


def save_image(tag: str, out: Path, reporter: Reporter = QUIET,
               engine: DockerEngine | None = None) -> SavedArchive:
    """Write the image as one OCI archive (also `docker load`-able), atomically."""
    ref = parse_ref(tag)
    engine = engine or DockerEngine.for_images()
    attrs = _present(engine, tag)
    out = Path(out)
    if out.is_dir():
        raise MurError("E-IMG-003", f"{out} is a directory", "give a file name, e.g. -o capsule.oci.tar")
    out.parent.mkdir(parents=True, exist_ok=True)
    raw = out.with_name(f".{out.name}.{os.getpid()}.docker-save")
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with reporter.step(f"export {tag} from the engine"):
            with open(raw, "wb") as fh:
                for chunk in engine.save(attrs["Id"]):
                    fh.write(chunk)
        saved = read_saved(raw)
        try:
            if saved.image_id != attrs["Id"]:
                raise MurError("E-IMG-003", f"the engine exported {saved.image_id}, not {attrs['Id']}")
            with reporter.step(f"write {out}"), open(tmp, "wb") as fh:
                digest = write_archive(fh, saved.config, saved.layers, [str(ref)])
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            saved.close()
        os.replace(tmp, out)
    except OSError as exc:
        raise MurError("E-IMG-003", f"cannot write {out}: {exc.strerror or exc}") from exc
    finally:
        for p in (raw, tmp):
            p.unlink(missing_ok=True)
    return SavedArchive(out, ImageRef(str(ref), attrs["Id"]), digest, out.stat().st_size)


def load_image(path: Path, reporter: Reporter = QUIET, engine: DockerEngine | None = None) -> ImageRef:
    """`docker load` an archive after checking it (one image, layers matching their digests)."""
    path = Path(path)
    if not path.is_file():
        raise MurError("E-IMG-003", f"image archive not found: {path}")
    saved = read_saved(path)
    try:
        image_id, tags = saved.image_id, saved.tags
    finally:
        saved.close()
    engine = engine or DockerEngine.for_images()
    with reporter.step(f"load {path.name} into the engine"), open(path, "rb") as fh:
        engine.load(fh)
    if engine.inspect(image_id) is None:
        raise MurError("E-IMG-001", f"the engine did not keep {image_id} from {path}")
    return ImageRef(tags[0] if tags else image_id, image_id)


def push_image(tag: str, reporter: Reporter = QUIET, engine: DockerEngine | None = None) -> ImageRef:
    """Push to the registry the tag names; the result carries the manifest digest the registry stored."""
    ref = parse_ref(tag)
    if not ref.registry:
        raise MurError("E-IMG-004", f"{tag} names no registry, so Docker would push it to Docker Hub",
                       f"tag it for your registry first, e.g. mur image build -t 127.0.0.1:5000/{ref.repository}:{ref.tag}")
    engine = engine or DockerEngine.for_images()
    attrs = _present(engine, tag)
    with reporter.step(f"push {ref} to {ref.registry}"):
        digest = engine.push(ref.repository, ref.tag, reporter.note)
    if not digest:
        raise MurError("E-IMG-002", f"the registry at {ref.registry} did not report a digest for {ref}")
    return ImageRef(str(ref), attrs["Id"], (f"{ref.repository}@{digest}",))


def pull_image(tag: str, reporter: Reporter = QUIET, engine: DockerEngine | None = None) -> ImageRef:
    """Pull from the registry the tag names; the result carries the image ID and its registry digests."""
    ref = parse_ref(tag)
    engine = engine or DockerEngine.for_images()
    with reporter.step(f"pull {ref}"):
        engine.pull(ref.repository, ref.tag, reporter.note)
    attrs = _present(engine, str(ref))
    return ImageRef(str(ref), attrs["Id"], tuple(attrs.get("RepoDigests") or ()))
