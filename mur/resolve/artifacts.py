"""Where each declared artifact comes from: the stores (project first, then global) or the disk.

Registry artifacts come from the stores (mur.artifacts.installed: digest-verified on every lookup).
Local-source artifacts (`source:` + `local_source: true`) come from disk: a skill is a `skill.md`
file or a directory holding one (any casing); a tool or driver may also be a directory holding its
own `murmur.yaml` and its `.wasm` payload (an extension over upstream, which resolves only
skill-shaped local payloads: it lets `examples/` run without a build/publish round trip).

A declared registry artifact that is installed nowhere is E-RUN-008 for every command (the code
upstream's run uses for it; E-REG-001 is a registry's "not found"), with the `mur install` hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.manifest import LoadedCapsule
from mur.manifest.artifact import ArtifactManifest, load_artifact_manifest
from mur.manifest.capsule import ArtifactDecl
from mur.resolve.files import FileRef, file_ref, relative_to, walk_files


@dataclass(frozen=True)
class ResolvedArtifact:
    """One declared artifact, located, with the files it is made of."""

    decl: ArtifactDecl
    kind: str  # "store" | "local"
    path: Path  # the .mur.zip (store), the skill file, or the local artifact directory
    manifest: ArtifactManifest | None = None  # the artifact's own murmur.yaml (None for bare skills)
    installed: Any = None  # mur.artifacts.installed.InstalledArtifact for store artifacts
    sha256: str | None = None  # the .mur.zip digest (store artifacts)
    files: tuple[FileRef, ...] = ()  # store: zip + sidecars (rel = file name); local: the source tree

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def role(self) -> str:
        return self.decl.runtime

    @property
    def is_native(self) -> bool:
        return self.manifest is not None and self.manifest.registry_runtime == "native"


def find_skill_md(directory: Path) -> Path | None:
    """`skill.md` in `directory`, any casing (the spec's rule for local skill directories)."""
    for child in sorted(directory.iterdir()):
        if child.is_file() and child.name.lower() == "skill.md":
            return child
    return None


def _local_files(base: Path, source: Path, origin: str, hashed: bool = True) -> tuple[FileRef, ...]:
    rel = relative_to(base, source)
    try:
        if source.is_dir():
            return tuple(walk_files(source, None if rel is None else f"{rel}/", origin, hashed))
        return (file_ref(source, rel, origin, hashed),)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot read {origin} at {exc.filename or source}: {exc.strerror or exc}") from exc


def _resolve_local(loaded: LoadedCapsule, decl: ArtifactDecl, hashed: bool = True) -> ResolvedArtifact:
    raw = Path(decl.source or "")
    path = raw if raw.is_absolute() else loaded.dir / raw
    if not path.exists():
        raise MurError("E-IO-001", f"skill source path not found: {path}", "fix `source:` (relative to murmur.yaml)")
    files = _local_files(loaded.dir, path, f"artifacts[{decl.name}].source", hashed)
    if path.is_file():
        return ResolvedArtifact(decl, "local", path, files=files)
    if (path / "murmur.yaml").is_file() and decl.runtime in ("tool", "driver", "hook"):
        return ResolvedArtifact(decl, "local", path, manifest=load_artifact_manifest(path), files=files)
    skill = find_skill_md(path)
    if skill is None:
        raise MurError(
            "E-IO-001",
            f"skill source directory '{path}' contains no skill.md",
            "add a skill.md to that directory, or point `source:` at the file itself",
        )
    return ResolvedArtifact(decl, "local", skill, files=files)


def _store_files(zip_path: Path, hashed: bool = True) -> tuple[FileRef, ...]:
    stem = zip_path.name[: -len(".mur.zip")] if zip_path.name.endswith(".mur.zip") else zip_path.stem
    files = [file_ref(zip_path, zip_path.name, hashed=hashed)]
    for suffix in (".sha256", ".meta.json"):
        side = zip_path.with_name(stem + suffix)
        if side.is_file():
            files.append(file_ref(side, side.name, hashed=hashed))
    return tuple(files)


def resolve_artifacts(loaded: LoadedCapsule, hashed: bool = True) -> dict[str, ResolvedArtifact]:
    """Locate every declared artifact (E-RUN-008 for a registry artifact not installed); `hashed=False`:
    their files' FileRef.sha256 stay empty (mur.resolve.files.file_ref)."""
    from mur.artifacts.installed import find_installed

    out: dict[str, ResolvedArtifact] = {}
    missing: list[ArtifactDecl] = []
    for decl in loaded.capsule.artifacts:
        if decl.source is not None:
            out[decl.name] = _resolve_local(loaded, decl, hashed)
            continue
        inst = find_installed(decl.name, decl.version or "", loaded.dir)
        if inst is None:
            missing.append(decl)
            continue
        zp = Path(inst.zip_path)
        out[decl.name] = ResolvedArtifact(decl, "store", zp, inst.manifest, inst, inst.sha256, _store_files(zp, hashed))
    if missing:  # upstream's words (scripts match on them)
        names = ", ".join(f"{d.name}@{d.version}" for d in missing)
        first = missing[0]
        raise MurError(
            "E-RUN-008",
            f"missing artifacts: {names}",
            f"run `mur install` to install all manifest dependencies (or `mur install {first.name}@{first.version}`)",
        )
    return out
