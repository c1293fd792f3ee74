"""The image an export names: the capsule's own (labels checked as deploy checks them), by digest.

A pod that names `registry/hello:0.1.0` runs whatever that tag points to when the node pulls; one
that names `registry/hello@sha256:...` runs exactly the image whose labels were checked here. The
digest is the one the registry stored, which the engine records at `mur image push` (or a pull):
an image that was never pushed has none, and a cluster could not pull it anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mur.errors import MurError
from mur.image.identity import capsule_mismatch, is_capsule_image, registry_digest
from mur.image.reference import parse_ref


@dataclass(frozen=True)
class PinnedImage:
    reference: str  # registry/repository@sha256:...
    given: str  # what --image said
    image_id: str


def _refused(message: str, hint: str | None = None) -> MurError:
    return MurError("E-EXP-001", message, hint)


def pin_image(given: str, cap: Any, engine: Any = None) -> PinnedImage:
    """Check `given` (NAME[:TAG] or NAME@sha256:DIGEST) against the capsule; the reference by digest."""
    name, at, digest = given.partition("@")
    try:
        parse_ref(name)
    except MurError as exc:
        raise _refused(f"--image: {exc.message}", exc.hint) from exc
    if at and not (digest.startswith("sha256:") and len(digest) == 71):
        raise _refused(f"--image: {given!r} has a digest that is not sha256:<64 hex digits>")
    if engine is None:
        from mur.engine.docker import DockerEngine

        try:
            engine = DockerEngine.for_images()
        except MurError as exc:
            raise _refused(f"cannot check the image {given}: {exc.message}",
                           "export reads the image's labels and registry digest from the Docker engine "
                           "that built or pulled it; run it there") from exc
    attrs = engine.inspect(given)
    if attrs is None:
        raise _refused(f"image {given} is not in the Docker engine",
                       f"build it (mur image build -m {cap.manifest_path} -t {name}) or pull it, then export")
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    if not is_capsule_image(labels):
        raise _refused(f"image {given} is not a mur capsule image (no dev.mur.capsule.* labels)",
                       f"build it with mur image build -m {cap.manifest_path}")
    wrong = capsule_mismatch(labels, cap)
    if wrong:
        raise _refused(f"image {given} was not built from {cap.manifest_path}: " + "; ".join(wrong),
                       f"export the manifest it was built from, or rebuild it: mur image build -m "
                       f"{cap.manifest_path} -t {name}")
    pinned = registry_digest(name, attrs)
    if at:
        if pinned is None or not pinned.endswith(digest):
            known = ", ".join(attrs.get("RepoDigests") or ()) or "none"
            raise _refused(f"image {given}: the engine's copy has other registry digests ({known})",
                           "pull that digest first, or give the tag and let export find the digest")
    elif pinned is None:
        raise _refused(f"image {given} has no registry digest yet: the pod names its image by digest, "
                       "and this one was never pushed (or pulled)",
                       f"push it first: mur image push {name}")
    return PinnedImage(pinned, given, str(attrs.get("Id") or ""))
