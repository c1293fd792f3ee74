"""`mur run` stages what murmur.lock pins (upstream's rule).

When the project has a murmur.lock, every registry artifact the manifest declares is staged at the
version its lock entry pins, whatever version the manifest names: the lock is the record of what
was installed and verified (`mur install` moves it). A declared artifact without an entry is
E-RUN-003 before anything else is looked up; a pinned version that is not installed is then
E-RUN-008 like any other missing artifact, and the pinned bytes are still checked against the
lock's digest. Local-source artifacts are never locked and pass through. Without a lock the
manifest's versions are resolved and the lock is written after every pre-check passed.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from mur.errors import MurError

if TYPE_CHECKING:
    from mur.manifest import LoadedCapsule


def pinned(loaded: LoadedCapsule) -> LoadedCapsule:
    """`loaded` with each registry artifact's version replaced by its murmur.lock pin (the same
    object when there is no lock)."""
    from mur.artifacts import lock as lockfile

    lock = lockfile.read_lock(lockfile.lock_path(loaded.dir))
    if lock is None:
        return loaded
    capsule = loaded.capsule
    artifacts = []
    for decl in capsule.artifacts:
        if decl.source is not None:
            artifacts.append(decl)
            continue
        entry = lock.entry(decl.name)
        if entry is None:
            raise MurError(
                "E-RUN-003",
                f"murmur.lock missing artifact entry for '{decl.name}'",
                f"run `mur install {decl.name}@{decl.version}` to pin it",
            )
        artifacts.append(decl if entry.resolved_version == decl.version
                         else decl.model_copy(update={"version": entry.resolved_version}))
    if all(a is b for a, b in zip(artifacts, capsule.artifacts)):
        return loaded
    return dataclasses.replace(loaded, capsule=capsule.model_copy(update={"artifacts": artifacts}))
