"""Everything a release is made of, gathered and hashed on this machine before any target is touched.

The capsule manifest (validated by the same loader `mur run` uses), the files it references
(system prompt files, murmur.lock, local-source artifact directories, the project config), the
installed artifacts it declares (digest-verified), an optional workdir seed, and the environment
(upstream's precedence: `--env` flags, else `--env-file`, else `.env` next to the manifest).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur.deploy.plan import ArtifactRef, FileRef, parse_env_args, parse_env_text
from mur.errors import MurError
from mur.fsutil import file_sha256

GiB = 1 << 30


@dataclass
class CapsuleInputs:
    manifest_path: Path
    capsule: Any  # mur.manifest.capsule.Capsule
    manifest: FileRef
    files: tuple[FileRef, ...] = ()
    workdir: tuple[FileRef, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    env_origin: str = "none"
    floor: str = "advisory"
    floor_source: str = "default"
    keep_lifecycle: bool = False
    notes: list[str] = field(default_factory=list)

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


def file_ref(path: Path, rel: str) -> FileRef:
    st = path.stat()
    return FileRef(str(path), rel, file_sha256(path), st.st_size, 0o755 if st.st_mode & 0o111 else 0o644)


def _inside(base: Path, rel: str, field_name: str) -> Path:
    if os.path.isabs(rel):
        raise MurError("E-DEPLOY-001", f"{field_name} is an absolute path ({rel}); deploy uploads files relative to murmur.yaml",
                       "move the file next to murmur.yaml and reference it relatively")
    path = (base / rel).resolve()
    if base.resolve() not in path.parents and path != base.resolve():
        raise MurError("E-DEPLOY-001", f"{field_name} ({rel}) points outside the manifest directory",
                       "move the file next to murmur.yaml and reference it relatively")
    return path


def _walk(root: Path, prefix: str) -> list[FileRef]:
    refs = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__",))
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_symlink() or not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            refs.append(file_ref(p, f"{prefix}{rel}" if prefix else rel))
    return refs


def load_manifest(path: Path):
    """Validate like `mur run` does; returns the parsed Capsule."""
    from mur.manifest.load import load_capsule

    return load_capsule(path).capsule


def referenced_files(capsule: Any, base: Path) -> list[FileRef]:
    """Files the manifest points at (must exist, must live under the manifest directory)."""
    out: list[FileRef] = []
    inf = capsule.inference
    wanted: list[tuple[str, str]] = []
    if inf is not None:
        if inf.system_prompt_file:
            wanted.append(("inference.system_prompt_file", inf.system_prompt_file))
        if inf.compaction is not None and inf.compaction.system_prompt_file:
            wanted.append(("inference.compaction.system_prompt_file", inf.compaction.system_prompt_file))
    for field_name, rel in wanted:
        p = _inside(base, rel, field_name)
        if not p.is_file():
            raise MurError("E-IO-001", f"manifest references {field_name} at {p} but the file does not exist")
        out.append(file_ref(p, p.relative_to(base.resolve()).as_posix()))
    for art in capsule.artifacts:
        if art.source:
            p = _inside(base, art.source, f"artifacts[{art.name}].source")
            if p.is_dir():
                out += _walk(p, p.relative_to(base.resolve()).as_posix() + "/")
            elif p.is_file():
                out.append(file_ref(p, p.relative_to(base.resolve()).as_posix()))
            else:
                raise MurError("E-IO-001", f"local-source artifact {art.name} not found at {p}")
    for extra in ("murmur.lock", ".murmur/config.yaml", "capsule.wasm"):
        p = base / extra
        if p.is_file():
            out.append(file_ref(p, extra))
    seen: dict[str, FileRef] = {}
    for ref in out:
        seen.setdefault(ref.rel, ref)
    return list(seen.values())


def installed_artifacts(capsule: Any, base: Path) -> list[ArtifactRef]:
    """The installed payload of every versioned artifact (project store, then global)."""
    from mur.artifacts.installed import find_installed

    out: list[ArtifactRef] = []
    seen: set[tuple[str, str]] = set()
    for art in capsule.artifacts:
        if art.source or not art.version or (art.name, art.version) in seen:
            continue
        seen.add((art.name, art.version))
        inst = find_installed(art.name, art.version, base)
        if inst is None:
            raise MurError("E-REG-001", f"artifact {art.name}@{art.version} not found locally",
                           f"install it first: mur install {art.name}@{art.version}")
        zp = Path(inst.zip_path)
        stem = zp.name[: -len(".mur.zip")]
        files = [file_ref(zp, zp.name)]
        for suffix in (".sha256", ".meta.json"):
            side = zp.with_name(stem + suffix)
            if side.is_file():
                files.append(file_ref(side, side.name))
        out.append(ArtifactRef(art.name, art.version, tuple(files), zp.name, inst.sha256))
    return out


def resolve_env(env_args: list[str], env_file: Path | None, manifest_dir: Path) -> tuple[dict[str, str], str]:
    """(env, where it came from): --env flags, else --env-file, else .env beside the manifest."""
    if env_args:
        return parse_env_args(env_args), "--env"
    if env_file is not None:
        try:
            text = env_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise MurError("E-IO-001", f"cannot read env file {env_file}: {exc.strerror or exc}") from exc
        return parse_env_text(text, str(env_file)), str(env_file)
    auto = manifest_dir / ".env"
    if auto.is_file():
        return parse_env_text(auto.read_text(encoding="utf-8"), str(auto)), str(auto)
    return {}, "none"


def containment_floor(capsule: Any, cli: str | None) -> tuple[str, str]:
    """(declared floor, source): strongest of manifest, config and --containment."""
    from mur.manifest.config import load_config
    from mur.manifest.containment import effective_floor

    cfg = load_config()
    floor = effective_floor(capsule.capabilities.containment, cfg.containment, cli)
    return floor.declared, floor.source


def gather(manifest: Path, *, workdir: Path | None = None, env_args: list[str] | None = None,
           env_file: Path | None = None, containment: str | None = None, keep_lifecycle: bool = False) -> CapsuleInputs:
    """Read and hash everything the release needs; raises before any target is contacted."""
    manifest = manifest if manifest.is_absolute() else Path.cwd() / manifest
    if not manifest.is_file():
        raise MurError("E-IO-001", f"manifest not found: {manifest}")
    capsule = load_manifest(manifest)
    base = manifest.parent
    if workdir is not None and not workdir.is_dir():
        raise MurError("E-IO-001", f"workdir not found: {workdir}")
    env, origin = resolve_env(env_args or [], env_file, base)
    floor, source = containment_floor(capsule, containment)
    inp = CapsuleInputs(
        manifest_path=manifest.resolve(), capsule=capsule, manifest=file_ref(manifest, "murmur.yaml"),
        files=tuple(referenced_files(capsule, base)),
        workdir=tuple(_walk(workdir, "")) if workdir else (),
        artifacts=tuple(installed_artifacts(capsule, base)),
        env=env, env_origin=origin, floor=floor, floor_source=source, keep_lifecycle=keep_lifecycle,
    )
    lc = capsule.lifecycle
    if inp.run_args:
        inp.notes.append(
            f"lifecycle is task_acceptance={lc.task_acceptance}, after_task={lc.after_task}: deployed as a service it "
            "runs with --lifecycle-task-acceptance queue --lifecycle-after-task sleep, so it keeps answering and "
            "results stay readable (--keep-lifecycle keeps the manifest's: one task per process, restarted after each)")
    elif not inp.long_lived:
        inp.notes.append(
            f"lifecycle is task_acceptance={lc.task_acceptance}, after_task={lc.after_task}: the service is restarted "
            "after every exit (restart=always, with backoff)")
    return inp
