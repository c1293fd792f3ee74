"""The on-disk artifact stores: `~/.murmur/artifacts/` (global) and `<project>/.murmur/artifacts/`.

Layout (upstream section 5.4), one directory per name and version::

    <root>/<name>/<version>/<name>-<version>.mur.zip          generic payload (wasm, static)
    <root>/<name>/<version>/<name>-<version>.sha256           hex sha256 of the zip bytes
    <root>/<name>/<version>/<name>-<version>.meta.json        {"meta": {name, version, runtime, ...}}
    <root>/<name>/<version>/<name>-<version>-<os-arch>.*      a platform variant (native)

Writes are atomic and concurrency-safe: writers of one name@version serialize on an ``flock`` of
``<version dir>/.lock``; each file is written to a temp file, fsynced, then renamed. The zip is
renamed last and is the commit point (an existing zip is unlinked first when overwriting), so a
crash at any moment leaves either the complete old set, the complete new set, or no artifact —
never a zip whose sidecar describes other bytes. The same class backs the registry server's disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from mur.errors import MurError
from mur.fsutil import DISK_FULL, disk_full_error, fsync_dir
from mur.manifest.yamlio import one_line
from mur.paths import MURMUR_DIR, home_dir, project_murmur_dir
from mur.platform import current_platform

STORE_DIR = "artifacts"  # under ~/.murmur and <project>/.murmur
RUNTIME_TYPES = ("wasm", "native", "static")
_STALE_TMP_SECONDS = 3600




def global_store(home: Path | None = None) -> Path:
    """`~/.murmur/artifacts` for `home` (default: $HOME)."""
    return Path(home if home is not None else home_dir()) / MURMUR_DIR / STORE_DIR


def project_store(project_dir: Path) -> Path:
    """`<project_dir>/.murmur/artifacts`."""
    return project_murmur_dir(project_dir) / STORE_DIR




def split_platform(tag: str) -> tuple[str, str] | None:
    """`os-arch` -> (os, arch); None when either half is empty or there is no '-'."""
    os_name, sep, arch = tag.partition("-")
    if not sep or not os_name.strip() or not arch.strip():
        return None
    return os_name, arch


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def integrity_error(name: str, version: str, hint: str | None = None) -> MurError:
    """E-REG-002 in upstream's words."""
    return MurError(
        "E-REG-002",
        f"artifact integrity check failed for {name}@{version}",
        hint or "artifact on disk does not match murmur.lock \u2014 re-publish or delete the lock",
    )


def validate_version_segment(version: str) -> None:
    """A version becomes a directory name: one plain path segment, nothing hidden."""
    bad = (
        not version
        or version in (".", "..")
        or version.startswith(".")
        or any(c in version for c in "/\\\0")
        or version != version.strip()
    )
    if bad:
        raise MurError(
            "E-IO-003",
            f"invalid artifact version '{one_line(version)}': a version must be one path segment "
            "(no '/', '\\', surrounding spaces, or leading '.')",
        )


@dataclass
class ArtifactMeta:
    """What a store (or the registry index) records about one artifact payload."""

    name: str
    version: str
    runtime: str  # wasm | native | static (registry packaging type)
    artifact_runtime: str = ""  # role from the artifact's own murmur.yaml: tool | driver | hook | skill
    platforms: list[tuple[str, str]] = field(default_factory=list)
    description: str | None = None
    tags: list[str] = field(default_factory=list)

    @property
    def platform_tags(self) -> list[str]:
        return [f"{o}-{a}" for o, a in self.platforms]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "runtime": self.runtime,
            "artifact_runtime": self.artifact_runtime,
            "platforms": [[o, a] for o, a in self.platforms],
            "description": self.description,
            "tags": list(self.tags),
        }

    @classmethod
    def from_dict(cls, raw: Any) -> "ArtifactMeta":
        """Parse one index/meta object; ValueError names what is wrong."""
        if not isinstance(raw, dict):
            raise ValueError("expected an object")
        for key in ("name", "version", "runtime", "artifact_runtime"):
            if not isinstance(raw.get(key), str):
                raise ValueError(f"missing field `{key}`")
        runtime = raw["runtime"].lower()
        if runtime not in RUNTIME_TYPES:
            raise ValueError(f"invalid runtime '{raw['runtime']}' (expected wasm|native|static)")
        platforms = []
        for pair in raw.get("platforms") or []:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise ValueError("platforms: expected [os, arch] pairs")
            platforms.append((pair[0], pair[1]))
        description = raw.get("description")
        tags = raw.get("tags") or []
        return cls(
            name=raw["name"],
            version=raw["version"],
            runtime=runtime,
            artifact_runtime=raw["artifact_runtime"],
            platforms=platforms,
            description=description if isinstance(description, str) else None,
            tags=[t for t in tags if isinstance(t, str)] if isinstance(tags, list) else [],
        )


def meta_from_manifest(manifest: Any, *, platforms: list[tuple[str, str]] | None = None) -> ArtifactMeta:
    """ArtifactMeta for bytes whose packed murmur.yaml parsed to `manifest`."""
    description = manifest.description or None
    return ArtifactMeta(
        name=manifest.name,
        version=manifest.version,
        runtime=manifest.registry_runtime,
        artifact_runtime=manifest.runtime,
        platforms=list(platforms or []),
        description=description,
    )


@dataclass(frozen=True)
class StoredArtifact:
    """One payload found in a store: where it is, the digest its sidecar records, its meta."""

    name: str
    version: str
    zip_path: Path
    sha256: str
    meta: ArtifactMeta
    platform: str | None

    def read_verified(self) -> bytes:
        """The zip bytes, checked against the .sha256 sidecar (E-REG-002 on mismatch)."""
        try:
            data = self.zip_path.read_bytes()
        except OSError as exc:
            raise MurError("E-IO-003", f"registry I/O error: {exc.strerror or exc}: {self.zip_path}") from exc
        if sha256_hex(data) != self.sha256:
            raise integrity_error(
                self.name,
                self.version,
                f"the stored {self.zip_path.name} does not match its .sha256 \u2014 reinstall it with "
                f"`mur install {self.name}@{self.version}`",
            )
        return data


@dataclass(frozen=True)
class InstalledArtifact:
    """An artifact installed in a store, as `mur run` / `mur deploy` consume it."""

    name: str
    version: str
    zip_path: Path
    sha256: str
    scope: str  # "project" | "global"
    manifest: Any  # ArtifactManifest: the artifact's own murmur.yaml from inside the zip


class Store:
    """One store root (global, project, or the registry server's data directory)."""

    def __init__(self, root: Path):
        self.root = Path(root)

    # paths ------------------------------------------------------------------------------------

    def artifact_dir(self, name: str, version: str) -> Path:
        _check_segments(name, version)
        return self.root / name / version

    def _stem(self, name: str, version: str, platform: str | None) -> str:
        return f"{name}-{version}-{platform}" if platform else f"{name}-{version}"

    def zip_path(self, name: str, version: str, platform: str | None = None) -> Path:
        return self.artifact_dir(name, version) / f"{self._stem(name, version, platform)}.mur.zip"

    def sha_path(self, name: str, version: str, platform: str | None = None) -> Path:
        return self.artifact_dir(name, version) / f"{self._stem(name, version, platform)}.sha256"

    def meta_path(self, name: str, version: str, platform: str | None = None) -> Path:
        return self.artifact_dir(name, version) / f"{self._stem(name, version, platform)}.meta.json"

    # reads ------------------------------------------------------------------------------------

    def exists(self, name: str, version: str, platform: str | None = None) -> bool:
        return self.zip_path(name, version, platform).is_file()

    def lookup(self, name: str, version: str, platform: str | None = None) -> StoredArtifact | None:
        """The platform variant if present, else the generic payload; None when absent."""
        chosen: str | None = None
        if platform and self.zip_path(name, version, platform).is_file() and self.sha_path(
            name, version, platform
        ).is_file():
            chosen = platform
        zip_path = self.zip_path(name, version, chosen)
        sha_path = self.sha_path(name, version, chosen)
        if not zip_path.is_file() or not sha_path.is_file():
            return None
        try:
            digest = sha_path.read_text(encoding="utf-8").strip().lower()
        except (OSError, UnicodeDecodeError) as exc:
            raise MurError("E-IO-003", f"registry I/O error: cannot read {sha_path}: {exc}") from exc
        if not digest:
            raise MurError("E-IO-003", f"registry error: artifact {name}@{version} has an empty sha256 sidecar")
        meta = self._read_meta(name, version, chosen) or _derived_meta(name, version, zip_path, chosen)
        return StoredArtifact(name, version, zip_path, digest, meta, chosen)

    def _read_meta(self, name: str, version: str, platform: str | None) -> ArtifactMeta | None:
        path = self.meta_path(name, version, platform)
        if not path.is_file():
            return None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            meta = ArtifactMeta.from_dict(raw.get("meta") if isinstance(raw, dict) else None)
        except (OSError, ValueError) as exc:
            raise MurError("E-IO-003", f"registry I/O error: invalid metadata at {path}: {exc}") from exc
        meta.name, meta.version = name, version
        return meta

    def list_index(self) -> list[ArtifactMeta]:
        """One row per name@version (platforms merged), sorted by name, version, runtime."""
        rows: list[ArtifactMeta] = []
        if not self.root.is_dir():
            return rows
        for name_dir in sorted(self.root.iterdir()):
            if name_dir.name.startswith(".") or not name_dir.is_dir():
                continue
            for version_dir in sorted(name_dir.iterdir()):
                if version_dir.name.startswith(".") or not version_dir.is_dir():
                    continue
                row = self._index_row(name_dir.name, version_dir.name, version_dir)
                if row is not None:
                    rows.append(row)
        rows.sort(key=lambda m: (m.name, m.version, m.runtime))
        return rows

    def _index_row(self, name: str, version: str, directory: Path) -> ArtifactMeta | None:
        prefix = f"{name}-{version}"
        payload_keys: list[str | None] = []
        for entry in sorted(os.listdir(directory)):
            if not entry.startswith(prefix) or not entry.endswith(".mur.zip"):
                continue
            tail = entry[len(prefix) : -len(".mur.zip")]
            if tail == "":
                payload_keys.append(None)
            elif tail.startswith("-"):
                payload_keys.append(tail[1:])
        metas = []
        for key in payload_keys:
            if not self.sha_path(name, version, key).is_file():
                continue
            meta = self._read_meta(name, version, key) or _derived_meta(
                name, version, self.zip_path(name, version, key), key
            )
            metas.append(meta)
        if not metas:
            return None
        row = ArtifactMeta(**{**metas[0].__dict__})
        row.platforms = sorted({p for m in metas for p in m.platforms})
        row.name, row.version = name, version
        return row

    # writes -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, name: str, version: str) -> Iterator[Path]:
        """Exclusive lock on one name@version directory (created if missing).

        A writer that fails in a directory it created removes it again, lock file included (see
        put): a waiter that then gets the lock holds an unlinked file, sees that and starts over."""
        directory = self.artifact_dir(name, version)
        for _ in range(100):
            try:
                directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue  # a parent was removed by a failed writer between mkdir and open
            except OSError as exc:
                if exc.errno in DISK_FULL:
                    raise disk_full_error(exc, directory) from exc
                raise MurError("E-IO-003", f"registry I/O error: cannot create {directory}: {exc.strerror or exc}") from exc
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink > 0:
                break
            os.close(fd)
        else:
            raise MurError("E-IO-003", f"registry I/O error: cannot lock {directory}: it keeps being removed")
        try:
            yield directory
        finally:
            os.close(fd)

    def put(
        self,
        meta: ArtifactMeta,
        sha256: str,
        *,
        data: bytes | None = None,
        src_file: Path | None = None,
        overwrite: bool,
    ) -> list[Path]:
        """Store one payload (under each of meta.platforms, or generic); returns the zip paths.

        `overwrite=False` is publish (E-REG-003 if any target exists), `True` is install.
        `src_file` must live on the same filesystem (it is hard-linked, then removed).
        """
        keys: list[str | None] = [f"{o}-{a}" for o, a in meta.platforms] or [None]
        created = _missing_dirs(self.artifact_dir(meta.name, meta.version))
        try:
            with self.locked(meta.name, meta.version) as directory:
                try:
                    written = self._put_locked(directory, meta, keys, sha256, data, src_file, overwrite)
                except BaseException:
                    if directory in created:  # nothing of ours may stay behind: not even the lock file
                        _remove_lock_dir(directory)
                    raise
        except BaseException:
            for parent in created[1:]:  # store root and name dirs this call created, when still empty
                with contextlib.suppress(OSError):
                    parent.rmdir()
            raise
        if src_file is not None:
            with contextlib.suppress(OSError):
                os.unlink(src_file)
        return written

    def remove(self, name: str, version: str) -> list[Path]:
        """Delete name@version (every platform variant) under its lock; returns the zips removed.

        The directory goes too, lock file last: a writer waiting on that lock sees it unlinked and
        starts over in a fresh directory (see `locked`)."""
        directory = self.artifact_dir(name, version)
        if not directory.is_dir():
            return []
        with self.locked(name, version):
            removed = [directory / e for e in sorted(os.listdir(directory)) if e.endswith(".mur.zip")]
            try:
                for entry in os.listdir(directory):
                    if entry != ".lock":
                        (directory / entry).unlink()
                (directory / ".lock").unlink()
                directory.rmdir()
            except OSError as exc:
                raise MurError("E-IO-003", f"registry I/O error: cannot remove {directory}: {exc.strerror or exc}") from exc
        with contextlib.suppress(OSError):
            directory.parent.rmdir()  # the name's last version
        return removed

    def versions(self, name: str) -> list[str]:
        """The version directories of `name` in this store, complete or not, sorted."""
        _check_segments(name, "0")
        try:
            entries = sorted(os.listdir(self.root / name))
        except OSError:
            return []
        return [v for v in entries if not v.startswith(".") and (self.root / name / v).is_dir()]

    def _put_locked(self, directory: Path, meta: ArtifactMeta, keys: list[str | None], sha256: str, data,
                    src_file, overwrite: bool) -> list[Path]:
        _clean_stale_tmp(directory)
        if not overwrite:
            for key in keys:
                if self.zip_path(meta.name, meta.version, key).exists():
                    raise conflict_error(meta.name, meta.version)
        written = []
        for key in keys:
            per = ArtifactMeta(**{**meta.__dict__})
            per.platforms = [split_platform(key)] if key else []  # type: ignore[list-item]
            written.append(self._commit(directory, per, key, sha256, data, src_file))
        fsync_dir(directory)
        return written

    def _commit(self, directory: Path, meta: ArtifactMeta, key: str | None, sha256: str, data, src_file) -> Path:
        zip_path = self.zip_path(meta.name, meta.version, key)
        sha_path = self.sha_path(meta.name, meta.version, key)
        meta_path = self.meta_path(meta.name, meta.version, key)
        seed = uuid.uuid4().hex
        tmp_zip = directory / f".{zip_path.name}.{seed}.tmp"
        tmp_sha = directory / f".{sha_path.name}.{seed}.tmp"
        tmp_meta = directory / f".{meta_path.name}.{seed}.tmp"
        try:
            if src_file is not None:
                os.link(src_file, tmp_zip)
            else:
                _write_synced(tmp_zip, data or b"")
            _write_synced(tmp_sha, sha256.encode())
            _write_synced(tmp_meta, json.dumps({"meta": meta.to_dict()}, indent=2).encode())
            # The zip is the commit point: without it nothing here counts as an artifact.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(zip_path)
            os.replace(tmp_meta, meta_path)
            os.replace(tmp_sha, sha_path)
            os.replace(tmp_zip, zip_path)
        except OSError as exc:
            for tmp in (tmp_zip, tmp_sha, tmp_meta):
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if exc.errno in DISK_FULL:
                raise disk_full_error(exc, zip_path) from exc
            raise MurError("E-IO-003", f"registry I/O error: writing {zip_path}: {exc.strerror or exc}") from exc
        return zip_path


def conflict_error(name: str, version: str, *, remote: bool = False) -> MurError:
    remove = ("remove it on the registry host" if remote
              else f"`mur unpublish {name}@{version}` removes the existing one")
    return MurError(
        "E-REG-003",
        f"artifact {name}@{version} already exists in registry",
        f"use a new version string, or {remove}",
    )


def install_zip(store_root: Path, zip_bytes: bytes, *, platform: str | None = None) -> InstalledArtifact:
    """Install `.mur.zip` bytes into a store atomically (overwriting that name@version).

    `platform` tags the stored payload only for native artifacts (wasm/static are one file for
    every host). Scope is "global" when `store_root` is the global store, else "project".
    """
    from mur.artifacts.package import ArchiveError, read_manifest_bytes
    from mur.manifest.artifact import validate_artifact_name

    try:
        manifest, _ = read_manifest_bytes(zip_bytes)
    except ArchiveError as exc:
        raise MurError("E-IO-003", f"artifact bytes are not a valid .mur.zip: {exc}") from exc
    validate_artifact_name(manifest.name)
    validate_version_segment(manifest.version)
    platforms = []
    if platform and manifest.registry_runtime == "native":
        pair = split_platform(platform)
        if pair:
            platforms = [pair]
    digest = sha256_hex(zip_bytes)
    store = Store(store_root)
    (zip_path,) = store.put(meta_from_manifest(manifest, platforms=platforms), digest, data=zip_bytes, overwrite=True)
    return InstalledArtifact(
        name=manifest.name,
        version=manifest.version,
        zip_path=zip_path,
        sha256=digest,
        scope=scope_of(store_root),
        manifest=manifest,
    )


def scope_of(store_root: Path) -> str:
    """"global" when `store_root` is $HOME's global store, else "project"."""
    try:
        is_global = Path(store_root).resolve() == global_store().resolve()
    except MurError:
        is_global = False
    return "global" if is_global else "project"


# --- helpers ----------------------------------------------------------------------------------


def _check_segments(name: str, version: str) -> None:
    if not name or name.startswith(".") or any(c in name for c in "/\\\0") or name in (".", ".."):
        raise MurError("E-BLD-001", f"invalid artifact name '{name}': must not be empty or contain path separators")
    validate_version_segment(version)


def _derived_meta(name: str, version: str, zip_path: Path, platform: str | None) -> ArtifactMeta:
    """Meta for a payload with no sidecar, read from its packed murmur.yaml (wasm if unreadable)."""
    from mur.artifacts.package import ArchiveError, read_manifest_bytes

    platforms = [p for p in [split_platform(platform)] if p] if platform else []
    try:
        manifest, _ = read_manifest_bytes(zip_path.read_bytes())
    except (OSError, ArchiveError):
        return ArtifactMeta(name, version, "wasm", "", platforms)
    meta = meta_from_manifest(manifest, platforms=platforms)
    meta.name, meta.version = name, version
    return meta


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    finally:
        os.close(fd)



def _missing_dirs(directory: Path) -> list[Path]:
    """`directory` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not directory.exists() and directory != directory.parent:
        missing.append(directory)
        directory = directory.parent
    return missing


def _remove_lock_dir(directory: Path) -> None:
    """Remove a name@version directory holding nothing but its lock file (under that lock)."""
    with contextlib.suppress(OSError):
        if [e.name for e in directory.iterdir()] == [".lock"]:
            (directory / ".lock").unlink()
            directory.rmdir()


def _clean_stale_tmp(directory: Path) -> None:
    """Remove temp files a crashed writer left behind (held under the directory lock)."""
    cutoff = time.time() - _STALE_TMP_SECONDS
    for entry in directory.iterdir():
        if entry.name.startswith(".") and entry.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < cutoff:
                    entry.unlink()
