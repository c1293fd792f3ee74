"""The resolved capsule: what `mur run` stages and `mur deploy` uploads, located and hashed.

    resolved = resolve_loaded(loaded, hashed=False)           # mur run: the manifest it already parsed
    resolved = resolve_capsule(path, env=deploy_env, hint=..)  # deploy: parse without the shell's env

Parse, then resolve (conventions.md habit 6): `LoadedCapsule` is what the user wrote, validated;
`ResolvedCapsule` adds what the machine holds: the referenced files with digests, every artifact
located, and the environment variables the manifest references (`${VAR}`), checked against the
environment the capsule will actually run with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from mur.manifest import LoadedCapsule
from mur.manifest.capsule import Capsule
from mur.resolve.artifacts import ResolvedArtifact, resolve_artifacts
from mur.resolve.files import FileRef, file_ref, relative_to

# Files beside murmur.yaml that belong to the capsule when present (the runtime reads each).
SIBLINGS = ("murmur.lock", ".murmur/config.yaml", "capsule.wasm")


@dataclass(frozen=True)
class ResolvedCapsule:
    loaded: LoadedCapsule
    manifest: FileRef  # murmur.yaml itself (rel "murmur.yaml")
    files: tuple[FileRef, ...]  # referenced prompt files and the SIBLINGS present, each once
    missing: tuple[tuple[str, Path, str], ...]  # (field, path, why) of referenced files not readable
    artifacts: Mapping[str, ResolvedArtifact]  # declared name -> located artifact (read-only)
    env_refs: Mapping[str, str]  # manifest field -> the variable it references
    referenced: Mapping[str, Path]  # manifest field naming a file (a prompt file) -> where it is

    def sibling(self, name: str) -> FileRef | None:
        """One of SIBLINGS (`capsule.wasm`, `murmur.lock`, ...) when it was there to resolve."""
        return next((f for f in self.files if f.rel == name and f.origin == name), None)

    @property
    def capsule(self) -> Capsule:
        return self.loaded.capsule

    @property
    def dir(self) -> Path:
        return self.loaded.dir

    def store_artifacts(self) -> list[ResolvedArtifact]:
        return [a for a in self.artifacts.values() if a.kind == "store"]


def _referenced(capsule: Capsule) -> list[tuple[str, str]]:
    inf = capsule.inference
    out: list[tuple[str, str]] = []
    if inf is not None:
        if inf.system_prompt_file:
            out.append(("inference.system_prompt_file", inf.system_prompt_file))
        if inf.compaction is not None and inf.compaction.system_prompt_file:
            out.append(("inference.compaction.system_prompt_file", inf.compaction.system_prompt_file))
    return out


def resolve_loaded(loaded: LoadedCapsule, hashed: bool = True) -> ResolvedCapsule:
    """Locate and hash everything a parsed manifest references (E-RUN-008, E-IO-001). `hashed=False`
    (`mur run`): located, not hashed (FileRef.sha256 empty; the engine hashes what it compiles)."""
    from mur.manifest.rules import env_references

    base = loaded.dir
    path = loaded.path or base / "murmur.yaml"
    files: dict[str, FileRef] = {}
    missing: list[tuple[str, Path, str]] = []
    # A run reports unreadable prompt files itself, in its own order (E-RUN-009): record, not raise.
    wanted = [(f, Path(t) if Path(t).is_absolute() else base / t) for f, t in _referenced(loaded.capsule)]
    wanted += [(name, base / name) for name in SIBLINGS if (base / name).is_file()]
    for field_path, p in wanted:
        try:
            if not p.is_file():
                raise FileNotFoundError(2, "the file does not exist")
            ref = file_ref(p, relative_to(base, p), field_path, hashed)
        except OSError as exc:
            missing.append((field_path, p, exc.strerror or str(exc)))
            continue
        files.setdefault(ref.rel or ref.src, ref)
    return ResolvedCapsule(
        loaded=loaded,
        manifest=file_ref(path, "murmur.yaml", "murmur.yaml", hashed),
        files=tuple(files.values()),
        missing=tuple(missing),
        artifacts=MappingProxyType(resolve_artifacts(loaded, hashed)),
        env_refs=MappingProxyType(env_references(loaded.capsule)),
        referenced=MappingProxyType({f: p for f, p in wanted if f not in SIBLINGS}),
    )


def check_env_refs(loaded: LoadedCapsule, env: Mapping[str, str], hint: str) -> None:
    """E-MAN-003 for the first `${VAR}` reference `env` does not set (the same text `mur run` gives)."""
    from mur.manifest.rules import env_references, unset_reference_error

    for field_path, variable in env_references(loaded.capsule).items():
        if variable not in env:
            raise unset_reference_error(field_path, variable, hint.format(var=variable))


def resolve_capsule(path: Path, *, env: Mapping[str, str], hint: str) -> ResolvedCapsule:
    """Parse (without the shell's environment), check `${VAR}` references against `env`, resolve.

    `hint` is shown when a reference is unset; `{var}` in it names the variable.
    """
    from mur.manifest.load import load_capsule

    loaded = load_capsule(path, resolve_env=False)  # E-IO-001 with its hint when there is none
    check_env_refs(loaded, env, hint)
    return resolve_loaded(loaded)
