"""Value types of mur.image: the image reference a build or transfer returns, and the reporter seam
(mur.progress: library code never prints)."""

from __future__ import annotations

from dataclasses import dataclass

from mur.progress import QUIET, Reporter

__all__ = ["QUIET", "ImageRef", "Reporter"]


@dataclass(frozen=True)
class ImageRef:
    """An image in an engine: the tag it was given, its ID (the config digest), registry digests."""

    tag: str
    id: str
    digests: tuple[str, ...] = ()
