"""Installed artifacts (the stores): find one, check it against `murmur.lock`, unpack its payload.

    inst = find_installed(name, version, project_dir)      # project store, then global; None if absent
    check_lock_for_run(project_dir, [inst, ...])            # create murmur.lock if absent, else verify
    payload = extract_payload(inst, staging_dir)            # zip-slip-safe unpack; returns the payload file

`find_installed` re-hashes the zip against its `.sha256` sidecar every time (E-REG-002 on a flipped
byte), and `extract_payload` hashes again right before unpacking so a file swapped in between is
caught too. Lock rules and messages are upstream's `stage_session`: a missing entry or a version
mismatch is E-RUN-003, a hash mismatch E-REG-002, an unreadable lock E-RUN-003. Local-source
artifacts never reach here: callers skip them (they are never locked).
"""

from __future__ import annotations

import os
from pathlib import Path

from mur.artifacts import lock as lockfile
from mur.artifacts.package import (
    SKILL_MD_ENTRY,
    ArchiveError,
    ArtifactArchive,
    PayloadShapeError,
    native_binary_entry,
    select_root_wasm,
)
from mur.artifacts.store import (
    InstalledArtifact,
    Store,
    global_store,
    integrity_error,
    project_store,
    sha256_hex,
)
from mur.errors import MurError
from mur.platform import current_platform

__all__ = [
    "InstalledArtifact",
    "find_installed",
    "check_lock_for_run",
    "extract_payload",
    "read_payload",
]


def _archive_error(name: str, version: str, message: str) -> MurError:
    return MurError("E-IO-003", f"failed to read artifact archive for {name}@{version}: {message}")


def find_installed(
    name: str, version: str, project_dir: Path | None, home: Path | None = None
) -> InstalledArtifact | None:
    """The installed artifact (project store first, then global), digest-verified; None if absent."""
    stores: list[tuple[str, Path]] = []
    if project_dir is not None:
        stores.append(("project", project_store(Path(project_dir))))
    stores.append(("global", global_store(home)))
    platform = current_platform()
    for scope, root in stores:
        stored = Store(root).lookup(name, version, None if platform == "unknown" else platform)
        if stored is None:
            continue
        data = stored.read_verified()
        try:
            manifest = ArtifactArchive(data).manifest()
        except ArchiveError as exc:
            raise _archive_error(name, version, str(exc)) from exc
        return InstalledArtifact(
            name=name, version=version, zip_path=stored.zip_path, sha256=stored.sha256, scope=scope, manifest=manifest
        )
    return None


def check_lock_for_run(project_dir: Path, resolved: list[InstalledArtifact], *, create: bool = True) -> None:
    """Verify every resolved artifact against murmur.lock; when it is absent, create it (atomically).

    `create=False` only verifies (an absent lock passes): `mur run` checks in its pre-check order
    and writes the lock only once every pre-check passed, so a refused run leaves no file behind.
    """
    project_dir = Path(project_dir)
    path = lockfile.lock_path(project_dir)
    with lockfile.project_locked(project_dir):
        lock = lockfile.read_lock(path)
        if lock is None:
            if not create:
                return
            fresh = lockfile.MurmurLock()
            for inst in resolved:
                if fresh.entry(inst.name) is None:
                    fresh.upsert(inst.name, inst.version, inst.sha256)
            lockfile.write_lock(path, fresh)
            return
    for inst in resolved:
        entry = lock.entry(inst.name)
        if entry is None:
            raise MurError(
                "E-RUN-003",
                f"murmur.lock missing artifact entry for '{inst.name}'",
                f"run `mur install {inst.name}@{inst.version}` to pin it",
            )
        if entry.resolved_version != inst.version:
            raise MurError(
                "E-RUN-003",
                f"lockfile version mismatch for '{inst.name}': manifest requested {inst.version}, "
                f"lock pinned {entry.resolved_version}",
                f"remove the stale murmur.lock entry, then run `mur install {inst.name}@{inst.version}`",
            )
        if entry.sha256 != inst.sha256:
            raise integrity_error(inst.name, inst.version)


def _verified_bytes(inst: InstalledArtifact) -> bytes:
    try:
        data = Path(inst.zip_path).read_bytes()
    except OSError as exc:
        raise _archive_error(inst.name, inst.version, exc.strerror or str(exc)) from exc
    if sha256_hex(data) != inst.sha256:
        raise integrity_error(
            inst.name, inst.version, f"the installed zip changed on disk; reinstall with `mur install {inst.name}@{inst.version}`"
        )
    return data


def payload_entry(inst: InstalledArtifact, names: list[str]) -> str | None:
    """The archive entry holding the payload: root wasm, bin/<name>, or skill.md (None if absent)."""
    runtime = inst.manifest.registry_runtime
    if runtime == "wasm":
        try:
            return select_root_wasm(names)
        except PayloadShapeError as exc:
            raise _archive_error(inst.name, inst.version, str(exc)) from exc
    if runtime == "native":
        entry = native_binary_entry(inst.name)
        if entry not in names:
            raise _archive_error(inst.name, inst.version, f"missing native binary {entry}")
        return entry
    for name in names:
        if name.lower() == SKILL_MD_ENTRY:
            return name
    return None


def read_payload(inst: InstalledArtifact) -> tuple[str | None, bytes]:
    """(entry name, bytes) of the payload, without touching the filesystem."""
    data = _verified_bytes(inst)
    try:
        archive = ArtifactArchive(data)
        entry = payload_entry(inst, archive.names)
        return entry, (archive.read(entry) if entry else b"")
    except ArchiveError as exc:
        raise _archive_error(inst.name, inst.version, str(exc)) from exc


def extract_payload(inst: InstalledArtifact, dest: Path) -> Path:
    """Unpack every entry below `dest` (zip-slip guarded, 500 MB ceiling); returns the payload path.

    The payload is the root wasm (wasm), `bin/<name>` made executable (native), or `skill.md`
    (static; `dest` itself when a static artifact has none).
    """
    dest = Path(dest)
    data = _verified_bytes(inst)
    try:
        archive = ArtifactArchive(data)
        entry = payload_entry(inst, archive.names)
        archive.extract_all(dest)
    except ArchiveError as exc:
        raise _archive_error(inst.name, inst.version, str(exc)) from exc
    if entry is None:
        return dest
    path = dest.joinpath(*entry.split("/"))
    if inst.manifest.registry_runtime == "native":
        os.chmod(path, 0o755)
    return path
