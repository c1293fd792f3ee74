"""What a capsule ships as: the resolved capsule (mur.resolve.capsule) plus what a release adds to it.

`ship` gathers and hashes it on this machine before any target, engine or cluster is touched: the
files to upload (each below the manifest directory: a target has no place for anything else,
E-DEPLOY-001), the store artifacts, an optional workdir seed, the environment (upstream's
precedence, and it must satisfy the manifest's `${VAR}` references: the service sees only it), the
containment floor, and the service settings the capsule's lifecycle implies. `mur deploy`,
`mur image build` and `mur export k8s` take the one `ShippedCapsule` it makes; its `digest` is what
deploy records and image labels carry, so a prebuilt image is matched against a manifest.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mur.errors import MurError
from mur.resolve.capsule import ResolvedCapsule, resolve_capsule
from mur.resolve.env import resolve_env
from mur.resolve.files import FileRef, file_ref, walk_files


@dataclass(frozen=True)
class ArtifactRef:
    """A store artifact as the target's global store holds it."""

    name: str
    version: str
    files: tuple[FileRef, ...]  # zip (+ .sha256, .meta.json), rel = file name
    zip_name: str
    sha256: str


class CapsuleContent(Protocol):
    manifest: FileRef
    files: tuple[FileRef, ...]
    artifacts: tuple[ArtifactRef, ...]


def digest_of(obj: Any) -> str:
    """sha256 of canonical JSON: the digests deploy and images compare."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def capsule_digest(content: CapsuleContent) -> str:
    """What the capsule is: manifest, referenced files, artifacts (a ShippedCapsule or a release's inputs).

    The same value `mur image build` labels an image with (dev.mur.capsule.digest), so a prebuilt
    image can be matched against a manifest."""
    return digest_of({
        "manifest": content.manifest.sha256,
        "files": sorted((f.rel, f.sha256) for f in content.files),
        "artifacts": sorted((a.name, a.version, a.sha256) for a in content.artifacts),
    })


GiB = 1 << 30
ENV_HINT = ("the service sees only the deployment's environment: pass --env {var}=... (or put it in --env-file "
            "or .env next to murmur.yaml); the deploying shell's variables are not sent")


@dataclass(frozen=True)
class ShippedCapsule:
    """The resolved capsule as it ships: what deploy uploads, `mur image build` layers and `mur export k8s`
    describes (made by `ship`, one function for the three)."""

    resolved: ResolvedCapsule
    manifest: FileRef
    files: tuple[FileRef, ...] = ()
    workdir: tuple[FileRef, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    env_origin: str = "none"
    floor: str = "advisory"
    floor_source: str = "default"
    keep_lifecycle: bool = False
    release_source: str | None = None  # deploy.release_source of the capsule's project (or global) config

    @property
    def capsule(self) -> Any:
        return self.resolved.capsule

    @property
    def manifest_path(self) -> Path:
        return Path(self.manifest.src)

    @property
    def name(self) -> str:
        return self.capsule.name

    @property
    def version(self) -> str:
        return self.capsule.version

    @property
    def mur_version(self) -> str | None:
        return self.capsule.mur_version

    @property
    def needs_subprocess(self) -> bool:
        """Shell or spawn grants: the runtime then needs a cgroup it can manage (E-RUN-012)."""
        caps = self.capsule.capabilities
        return bool(caps.shell_allow or caps.spawn_allow)

    @property
    def long_lived(self) -> bool:
        lc = self.capsule.lifecycle
        return lc.task_acceptance == "queue" and lc.after_task == "sleep"

    @property
    def run_args(self) -> tuple[str, ...]:
        """A capsule that would exit after one task is served as a queue (see docs/deploy.md)."""
        if self.long_lived or self.keep_lifecycle or self.capsule.lifecycle.task_acceptance == "none":
            return ()
        return ("--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep")

    @property
    def restart_policy(self) -> str:
        """on-failure for a service that waits for tasks; always for one that exits after each."""
        if self.long_lived or self.run_args or self.capsule.lifecycle.task_acceptance == "none":
            return "on-failure"
        return "always"

    @property
    def internal_port(self) -> int | None:
        return self.capsule.network.internal_port

    @property
    def service_memory_bytes(self) -> int:
        return int(self.capsule.capabilities.resources.cgroup_memory_bytes) + GiB

    @property
    def service_tasks_max(self) -> int:
        return int(self.capsule.capabilities.resources.cgroup_pids_max) + 128

    @property
    def digest(self) -> str:
        """The capsule digest (manifest, files, artifacts): deploy's records and image labels share it."""
        return capsule_digest(self)

    @property
    def upload_bytes(self) -> int:
        return self.manifest.size + sum(f.size for f in self.files) + sum(a.files[0].size for a in self.artifacts)

    def notes(self) -> list[str]:
        lc = self.capsule.lifecycle
        if self.run_args:
            return [f"lifecycle is task_acceptance={lc.task_acceptance}, after_task={lc.after_task}: deployed as a "
                    "service it runs with --lifecycle-task-acceptance queue --lifecycle-after-task sleep, so it keeps "
                    "answering and results stay readable (--keep-lifecycle keeps the manifest's: one task per "
                    "process, restarted after each)"]
        if not self.long_lived:
            return [f"lifecycle is task_acceptance={lc.task_acceptance}, after_task={lc.after_task}: the service is "
                    "restarted after every exit (restart=always, with backoff)"]
        return []

    def wasm_sources(self) -> list[tuple[str, bytes]]:
        """(label, wasm bytes) of every component the capsule runs: its own, local sources, artifacts."""
        from mur.artifacts.installed import read_payload

        out = [(f.rel or f.src, Path(f.src).read_bytes()) for f in self.files if str(f.rel).endswith(".wasm")]
        for art in self.resolved.store_artifacts():
            entry, data = read_payload(art.installed)
            if entry and entry.endswith(".wasm") and data:
                out.append((f"{art.name}@{art.decl.version}", data))
        return out


def _uploadable(ref: FileRef) -> FileRef:
    if ref.rel is None:
        raise MurError("E-DEPLOY-001", f"{ref.origin} ({ref.src}) is outside the manifest directory; deploy uploads "
                       "files relative to murmur.yaml", "move the file next to murmur.yaml and reference it relatively")
    return ref


def _artifact_ref(art: Any) -> ArtifactRef:
    zip_ref = art.files[0]
    return ArtifactRef(art.name, str(art.decl.version), art.files, str(zip_ref.rel), str(art.sha256))


def ship(manifest: Path, *, workdir: Path | None = None, env_args: list[str] | None = None,
         env_file: Path | None = None, containment: str | None = None, keep_lifecycle: bool = False) -> ShippedCapsule:
    """Read and hash everything the release needs; raises before any target is contacted."""
    from mur.manifest.config import load_config
    from mur.manifest.containment import effective_floor
    from mur.paths import manifest_path

    manifest = manifest_path(manifest if manifest.is_absolute() else Path.cwd() / manifest)
    env, origin = resolve_env(env_args or [], env_file, manifest.parent)
    resolved = resolve_capsule(manifest, env=env, hint=ENV_HINT)
    for field_path, path, why in resolved.missing:
        if not path.exists():  # upstream deploy's message for a referenced file
            raise MurError("E-IO-001", f"manifest references {field_path} at {path} but the file does not exist")
        raise MurError("E-IO-001", f"cannot read {field_path} at {path}: {why}")
    if workdir is not None and not workdir.is_dir():
        raise MurError("E-IO-001", f"workdir not found: {workdir}")
    files: dict[str, FileRef] = {}
    for ref in (*resolved.files, *(f for a in resolved.artifacts.values() if a.kind == "local" for f in a.files)):
        files.setdefault(str(_uploadable(ref).rel), ref)
    config = load_config(cwd=manifest.parent)  # the capsule's project, wherever deploy is run from
    floor = effective_floor(resolved.capsule.capabilities.containment, config.containment, containment)
    arts = {(a.name, str(a.decl.version)): _artifact_ref(a) for a in resolved.store_artifacts()}
    try:
        seed = tuple(walk_files(workdir, "")) if workdir else ()
    except OSError as exc:
        raise MurError("E-IO-001", f"cannot read the workdir seed {workdir}: {exc.strerror or exc}") from exc
    return ShippedCapsule(
        resolved=resolved, manifest=file_ref(manifest.resolve(), "murmur.yaml", "murmur.yaml"),
        files=tuple(files.values()), workdir=seed, artifacts=tuple(arts.values()),
        env=env, env_origin=origin, floor=floor.declared, floor_source=floor.source, keep_lifecycle=keep_lifecycle,
        release_source=config.release_source)
