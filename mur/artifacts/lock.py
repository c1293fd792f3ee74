"""`murmur.lock` (lock_version 1): pinned versions and sha256 of the whole `.mur.zip` bytes.

    lock_version: 1
    artifacts:
    - name: some-tool
      resolved_version: 1.2.3
      sha256:
        wasm: <hex>          # the key is literally `wasm`, whatever the payload type

Who writes it (spec "Lockfile"): `mur run` creates it when absent and otherwise only verifies;
`mur install name@version` into a project verifies then upserts; `-g`, local-file installs and
local-source artifacts never touch it. A disagreement is refused before anything is written.
Messages are upstream's (`lockfile.rs`, `commands/mod.rs`): every invalid lock is E-RUN-003
`invalid murmur.lock: ...`, I/O failures E-IO-003. Writers hold an `flock` on the project
directory so two concurrent installs cannot lose each other's entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml

from mur.errors import MurError
from mur.fsutil import DISK_FULL, disk_full_error

LOCK_VERSION = 1
LOCK_FILENAME = "murmur.lock"


@dataclass
class LockedArtifact:
    name: str
    resolved_version: str
    sha256: str  # serialized as sha256.wasm


@dataclass
class MurmurLock:
    lock_version: int = LOCK_VERSION
    artifacts: list[LockedArtifact] = field(default_factory=list)

    def entry(self, name: str) -> LockedArtifact | None:
        """The first entry pinning `name`."""
        return next((a for a in self.artifacts if a.name == name), None)

    def upsert(self, name: str, version: str, sha256: str) -> None:
        """Pin name at version/sha256, keeping every other entry (and the order) as it was."""
        current = self.entry(name)
        if current is None:
            self.artifacts.append(LockedArtifact(name, version, sha256))
        else:
            current.resolved_version = version
            current.sha256 = sha256

    def remove_versions(self, name: str, versions: list[str]) -> bool:
        """Drop the entries pinning `name` at one of `versions`; whether any was dropped."""
        kept = [a for a in self.artifacts if not (a.name == name and a.resolved_version in versions)]
        dropped = len(kept) != len(self.artifacts)
        self.artifacts = kept
        return dropped

    def validate(self) -> None:
        """E-RUN-003 unless lock_version is 1 and every entry names a version and a hash."""
        if self.lock_version != LOCK_VERSION:
            raise invalid_lock(f"unsupported lock_version {self.lock_version} (expected {LOCK_VERSION})")
        for entry in self.artifacts:
            if not entry.name.strip():
                raise invalid_lock("artifact entry has empty name")
            if not entry.resolved_version.strip():
                raise invalid_lock(f"artifact '{entry.name}' has empty resolved_version")
            if not entry.sha256.strip():
                raise invalid_lock(f"artifact '{entry.name}' has empty sha256.wasm")

    def to_yaml(self) -> str:
        doc = {
            "lock_version": self.lock_version,
            "artifacts": [
                {"name": a.name, "resolved_version": a.resolved_version, "sha256": {"wasm": a.sha256}}
                for a in self.artifacts
            ],
        }
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)


def invalid_lock(message: str) -> MurError:
    return MurError(
        "E-RUN-003",
        f"invalid murmur.lock: {message}",
        "fix murmur.lock, or delete it and run `mur install` to regenerate it",
    )


def lock_path(project_dir: Path) -> Path:
    return Path(project_dir) / LOCK_FILENAME


def _type(value: Any) -> str:
    if value is None:
        return "unit value"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "sequence"
    return "map"


def _parse_error(message: str) -> MurError:
    return invalid_lock(f"YAML parse error: {message}")


def parse_lock(text: str) -> MurmurLock:
    """Parse and validate lock text (E-RUN-003 on any problem)."""
    try:
        root = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _parse_error(str(exc).replace("\n", " ")) from exc
    if not isinstance(root, dict):
        raise _parse_error(f"invalid type: {_type(root)}, expected struct MurmurLock")
    if "lock_version" not in root:
        raise _parse_error("missing field `lock_version`")
    version = root["lock_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise _parse_error(f"lock_version: invalid type: {_type(version)}, expected u32")
    if "artifacts" not in root:
        raise _parse_error("missing field `artifacts`")
    raw_entries = root["artifacts"]
    if not isinstance(raw_entries, list):
        raise _parse_error(f"artifacts: invalid type: {_type(raw_entries)}, expected a sequence")
    entries = []
    for index, raw in enumerate(raw_entries):
        where = f"artifacts[{index}]"
        if not isinstance(raw, dict):
            raise _parse_error(f"{where}: invalid type: {_type(raw)}, expected struct LockedArtifact")
        for key in ("name", "resolved_version", "sha256"):
            if key not in raw:
                raise _parse_error(f"{where}: missing field `{key}`")
        for key in ("name", "resolved_version"):
            if not isinstance(raw[key], str):
                raise _parse_error(f"{where}.{key}: invalid type: {_type(raw[key])}, expected a string")
        sha = raw["sha256"]
        if not isinstance(sha, dict):
            raise _parse_error(f"{where}.sha256: invalid type: {_type(sha)}, expected struct LockedSha256")
        if "wasm" not in sha:
            raise _parse_error(f"{where}.sha256: missing field `wasm`")
        if not isinstance(sha["wasm"], str):
            raise _parse_error(f"{where}.sha256.wasm: invalid type: {_type(sha['wasm'])}, expected a string")
        entries.append(LockedArtifact(raw["name"], raw["resolved_version"], sha["wasm"]))
    lock = MurmurLock(lock_version=version, artifacts=entries)
    lock.validate()
    return lock


def read_lock(path: Path) -> MurmurLock | None:
    """The lock at `path`, or None when there is no file."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read murmur.lock at {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _parse_error("stream did not contain valid UTF-8") from exc
    return parse_lock(text)


def write_lock(path: Path, lock: MurmurLock) -> None:
    """Validate, then write atomically (temp file in the same directory, fsync, rename)."""
    lock.validate()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(lock.to_yaml().encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno in DISK_FULL:
            raise disk_full_error(exc, path) from exc
        raise MurError("E-IO-003", f"failed to write murmur.lock at {path}: {exc.strerror or exc}") from exc
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


@contextlib.contextmanager
def project_locked(project_dir: Path) -> Iterator[None]:
    """Serialize lock read-modify-write across processes (flock on the project directory)."""
    try:
        fd = os.open(project_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to open project directory {project_dir}: {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def check_install_conflict(lock: MurmurLock | None, name: str, version: str, sha256: str) -> None:
    """E-REG-005 when an existing pin disagrees with a registry-resolved version/hash."""
    if lock is None:
        return
    entry = lock.entry(name)
    if entry is None:
        return
    if entry.resolved_version != version or entry.sha256 != sha256:
        raise MurError(
            "E-REG-005",
            f"murmur.lock conflict for '{name}': pinned {entry.name}@{entry.resolved_version} "
            f"(sha256 {entry.sha256}), but the registry now resolves {name}@{version} (sha256 {sha256})",
            "if this is an intentional upgrade, remove the stale entry from murmur.lock before installing again",
        )
