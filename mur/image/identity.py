"""Is this image the capsule's? Its labels against the manifest, and the registry digest to pin it by.

A capsule image carries the capsule's name, version and digest and the mur version in its labels
(mur.image.spec); whoever runs a prebuilt image (deploy --docker --image, export k8s) checks them
before trusting it to be the manifest it is given with.
"""

from __future__ import annotations

from typing import Any

from mur import __version__
from mur.image.reference import parse_ref
from mur.image.spec import LABEL_PREFIX as L


def capsule_mismatch(labels: dict[str, str], cap: Any) -> list[str]:
    """Where an image's labels disagree with a gathered capsule (empty: it is this capsule's image)."""
    want = {"capsule.name": cap.name, "capsule.version": cap.version, "capsule.digest": cap.digest,
            "mur_version": cap.mur_version or __version__}
    return [f"{key} is {labels.get(L + key) or '(none)'}, the manifest's {value}"
            for key, value in want.items() if labels.get(L + key) != value]


def is_capsule_image(labels: dict[str, str]) -> bool:
    return bool(labels.get(f"{L}capsule.digest") and labels.get(f"{L}mur_version"))


def registry_digest(ref: str, attrs: dict[str, Any]) -> str | None:
    """`registry/repository@sha256:...` of `ref`'s repository from an image's RepoDigests (what the
    engine recorded at push or pull), or None when the image was never in that registry."""
    want = parse_ref(ref)
    for entry in attrs.get("RepoDigests") or ():
        name, _, digest = str(entry).partition("@")
        if not digest.startswith("sha256:"):
            continue
        try:
            got = parse_ref(f"{name}:latest")
        except Exception:  # noqa: BLE001 - an entry mur cannot parse is not the one asked for
            continue
        if (got.registry, got.repository) == (want.registry, want.repository):
            return f"{name}@{digest}"
    return None
