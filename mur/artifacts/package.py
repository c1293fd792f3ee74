"""Reading a `.mur.zip` safely, and the payload-shape rule build and run share.

Every reader goes through ``ArtifactArchive``: entry names are checked with the zip-slip guard
(``sanitize_entry_path``), every decompressed read is capped (500 MB by default, overridable with
``MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES`` as upstream), and extraction only ever creates regular
files with ``O_EXCL | O_NOFOLLOW`` below a fresh destination. Messages are upstream's
(``zip_guard.rs``, ``payload_shape.rs``, ``artifact.rs``) so callers can wrap them verbatim.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from pathlib import Path
from typing import Iterable, Iterator

from mur.errors import MurError
from mur.fsafe import Tree

MANIFEST_ENTRY = "murmur.yaml"
CAPSULE_WASM_ENTRY = "capsule.wasm"
SKILL_MD_ENTRY = "skill.md"
WASM_EXTENSION = ".wasm"
MAX_BYTES_ENV = "MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES"
DEFAULT_MAX_BYTES = 500 * 1024 * 1024
_CHUNK = 1024 * 1024


class ArchiveError(Exception):
    """A `.mur.zip` that cannot be read as an artifact; ``str()`` is upstream's message."""


class UnsafeEntryPath(ArchiveError):
    def __init__(self, name: str, reason: str):
        super().__init__(f"zip entry '{name}' has an unsafe path: {reason}")
        self.name = name
        self.reason = reason


class PayloadShapeError(ValueError):
    """The entry set is not a launchable wasm payload (upstream's text is the message)."""


def max_decompressed_bytes() -> int:
    """The per-entry decompression ceiling: $MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES or 500 MB."""
    raw = os.environ.get(MAX_BYTES_ENV, "")
    try:
        value = int(raw)
    except ValueError:
        return DEFAULT_MAX_BYTES
    return value if value >= 0 else DEFAULT_MAX_BYTES


def sanitize_entry_path(raw_name: str) -> str:
    """The entry name as a safe relative path (leading '/' stripped); UnsafeEntryPath on '..'."""
    stripped = raw_name.lstrip("/")
    parts = [p for p in stripped.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafeEntryPath(raw_name, "contains a '..' component")
    return "/".join(parts)


def is_root_wasm_candidate(name: str) -> bool:
    """A root `*.wasm` entry: safe, one path component, no leading '/'."""
    if not name.endswith(WASM_EXTENSION) or name.startswith("/") or "/" in name:
        return False
    try:
        sanitize_entry_path(name)
    except UnsafeEntryPath:
        return False
    return True


def select_root_wasm(entry_names: Iterable[str]) -> str:
    """The wasm payload entry: root capsule.wasm wins, else exactly one root *.wasm."""
    candidates = [n for n in entry_names if is_root_wasm_candidate(n)]
    if CAPSULE_WASM_ENTRY in candidates:
        return CAPSULE_WASM_ENTRY
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise PayloadShapeError("missing root .wasm file (expected capsule.wasm or one root *.wasm)")
    raise PayloadShapeError("multiple root .wasm files found: " + ", ".join(sorted(candidates)))


def native_binary_entry(artifact_name: str) -> str:
    """A native artifact's payload entry: `bin/<name>`."""
    return f"bin/{artifact_name}"


class ArtifactArchive:
    """An opened `.mur.zip` held in memory, read only through the guard and the ceiling."""

    def __init__(self, data: bytes):
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zip.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
            raise ArchiveError(f"invalid artifact archive at <bytes>: {exc}") from exc
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ArchiveError(f"invalid artifact archive at <bytes>: duplicate entry '{dup}'")
        self._infos = {i.filename: i for i in infos}
        self._order = names

    @property
    def names(self) -> list[str]:
        """File entry names in archive order (directory entries left out)."""
        return [n for n in self._order if not n.endswith("/")]

    def has(self, name: str) -> bool:
        return name in self._infos

    def read(self, name: str, limit: int | None = None) -> bytes:
        """Decompress one entry, failing once more than the ceiling has been produced."""
        limit = max_decompressed_bytes() if limit is None else limit
        info = self._infos.get(name)
        if info is None:
            raise ArchiveError(f"zip archive error: specified file not found in archive: {name}")
        out = bytearray()
        try:
            with self._zip.open(info) as fh:
                while True:
                    chunk = fh.read(min(_CHUNK, limit + 1 - len(out)) or 1)
                    if not chunk:
                        break
                    out += chunk
                    if len(out) > limit:
                        raise ArchiveError(
                            f"zip entry '{name}' exceeds the {limit}-byte decompression ceiling"
                        )
        except ArchiveError:
            raise
        except (zipfile.BadZipFile, zlib.error, NotImplementedError, RuntimeError, EOFError, OSError) as exc:
            raise ArchiveError(f"zip archive error: {exc}") from exc
        return bytes(out)

    def manifest_text(self) -> str:
        """The packed root `murmur.yaml` as text."""
        if MANIFEST_ENTRY not in self._infos:
            raise ArchiveError("artifact missing required file murmur.yaml")
        raw = self.read(MANIFEST_ENTRY)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ArchiveError(f"zip entry '{MANIFEST_ENTRY}' is not valid UTF-8") from exc

    def manifest(self):
        """The packed manifest parsed with the artifact-manifest parser (ArchiveError on failure)."""
        from mur.manifest.artifact import parse_artifact_manifest

        text = self.manifest_text()
        try:
            return parse_artifact_manifest(text)
        except MurError as exc:
            raise ArchiveError(exc.message) from exc

    def entries(self, skip: Iterable[str] = ()) -> Iterator[tuple[str, bytes]]:
        """(sanitized relative path, bytes) of every file entry but those named in `skip` (not even
        decompressed), within the decompression ceiling."""
        limit = max_decompressed_bytes()
        total = 0
        for name in self.names:
            if name in skip:
                continue
            if name.startswith("/"):
                raise UnsafeEntryPath(name, "contains an absolute path component")
            rel = sanitize_entry_path(name)
            if not rel:
                continue
            data = self.read(name, limit=limit)
            total += len(data)
            if total > limit:
                raise ArchiveError(f"zip entry '{name}' exceeds the {limit}-byte decompression ceiling")
            yield rel, data

    def extract_all(self, dest: Path | Tree, skip: Iterable[str] = ()) -> list[str]:
        """Unpack every file entry (but those named in `skip`) below `dest` (a path, or a Tree held
        open); returns the relative paths written. Nothing is written through a link or over an
        existing file."""
        tree = dest if isinstance(dest, Tree) else Tree(dest, create=True)
        written: list[str] = []
        try:
            for rel, data in self.entries(skip):
                try:
                    fd = tree.create(rel, 0o644, parents=True)
                except OSError as exc:
                    raise ArchiveError(f"zip entry '{rel}' cannot be unpacked: {exc.strerror or exc}") from exc
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                written.append(rel)
        finally:
            if tree is not dest:
                tree.close()
        return written


def read_manifest_bytes(data: bytes):
    """(ArtifactManifest, manifest text) of `.mur.zip` bytes; ArchiveError when unreadable."""
    archive = ArtifactArchive(data)
    text = archive.manifest_text()
    return archive.manifest(), text
