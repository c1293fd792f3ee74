"""`mur uninstall` and `mur unpublish`: take artifacts out of the local stores.

`uninstall NAME[@VERSION] [-g]` removes from the project store (the nearest murmur.yaml's
`.murmur/artifacts`) or, with -g, the global one; a bare NAME removes every version. In a project,
the murmur.lock entry pinning a removed version goes too: the pin describes bytes that are no longer
installed, and keeping it would refuse the next `mur install` of another version (E-REG-005).
`unpublish NAME@VERSION` removes a version from the local registry (`~/.murmur/artifacts`, where
`mur publish` puts it), so the same name@version can be published again (the E-REG-003 hint). A
Nexus registry has no delete in its API: unpublishing from one is refused with a hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mur.artifacts import lock as lockfile
from mur.artifacts.operations import find_project_root
from mur.artifacts.refs import BareRef, VersionedRef, parse_ref
from mur.artifacts.store import Store, global_store, project_store
from mur.errors import MurError


@dataclass
class Removal:
    name: str
    scope: str  # "project" | "global" | "local registry"
    store: Path
    versions: list[str] = field(default_factory=list)
    unpinned: bool = False

    @property
    def place(self) -> str:
        """`the project store`, `the global store` or `the local registry`."""
        return f"the {self.scope}" if self.scope == "local registry" else f"the {self.scope} store"

    def to_json(self) -> dict:
        return {"name": self.name, "versions": self.versions, "scope": self.scope, "store": str(self.store),
                "unpinned": self.unpinned}


def _name_and_version(ref_text: str, *, need_version: bool, command: str) -> tuple[str, str | None]:
    ref = parse_ref(ref_text)
    if isinstance(ref, VersionedRef):
        return ref.name, ref.version
    if isinstance(ref, BareRef) and not need_version:
        return ref.name, None
    form = "NAME@VERSION" if need_version else "NAME or NAME@VERSION"
    raise MurError("E-IO-003", f"`mur {command}` takes {form}, got '{ref_text}'",
                   f"e.g. mur {command} greet@0.1.0")


def _remove(store: Store, name: str, version: str | None, scope: str) -> Removal:
    from mur.manifest.artifact import validate_artifact_name

    validate_artifact_name(name)
    present = store.versions(name)
    if version is not None:
        present = [version] if version in present else []
    if not present:
        what = f"{name}@{version}" if version else name
        removal = Removal(name, scope, store.root)
        raise MurError("E-REG-001", f"artifact {what} is not in {removal.place} ({store.root})",
                       "`mur list --all` shows what is installed where")
    for v in present:
        store.remove(name, v)
    return Removal(name, scope, store.root, present)


def uninstall(ref_text: str, *, global_: bool = False, cwd: Path | None = None) -> Removal:
    """Remove NAME[@VERSION] from the project store (unpinning it) or, with `global_`, the global one."""
    name, version = _name_and_version(ref_text, need_version=False, command="uninstall")
    if global_:
        return _remove(Store(global_store()), name, version, "global")
    root = find_project_root(Path(cwd or Path.cwd()))
    path = lockfile.lock_path(root)
    with lockfile.project_locked(root):
        removal = _remove(Store(project_store(root)), name, version, "project")
        lock = lockfile.read_lock(path)
        if lock is not None and lock.remove_versions(name, removal.versions):
            lockfile.write_lock(path, lock)
            removal.unpinned = True
    return removal


def unpublish(ref_text: str, *, registry: str | None = None) -> Removal:
    """Remove NAME@VERSION from the local registry (the global store)."""
    name, version = _name_and_version(ref_text, need_version=True, command="unpublish")
    if registry is not None and registry.strip().lower() != "local":
        raise MurError("E-IO-003", f"cannot unpublish from {registry}: the registry API has no delete",
                       "remove it on the registry host (its --data directory), or publish a new version")
    return _remove(Store(global_store()), name, version, "local registry")
