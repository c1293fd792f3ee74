"""Staging: lay each resolved artifact out under `tools/<name>/` and write MURMUR.md.

  * a store artifact's `.mur.zip` is unpacked (zip-slip guarded) into tools/<name>/;
  * a local-source artifact directory has its murmur.yaml and requires_files copied there;
  * a skill becomes tools/<name>/skill.md (local skills installed as lowercase skill.md);
  * each `capabilities.shell.allow` binary gets a synthetic tools/<bin>/murmur.yaml.
tools/ is in the tools' workdir, so every write there goes through mur.fsafe (a previous run's tools
may have left links). The wasm a guest runs is NOT the staged copy: each payload is also copied
into a runtime-private directory, `<cache root>/payloads/<session id>/` (0700, outside every tree a
tool can write), and that copy is what wasmtime compiles. It is removed at session end; one left by
a killed run is swept by the next: each is flock()ed by its live owner.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mur import paths
from mur.errors import MurError
from mur.fsafe import LinkRefused, Tree
from mur.resolve.artifacts import ResolvedArtifact
from mur.session.workdir import Workdir, refused

PAYLOADS = "payloads"
LOCK = ".owner.lock"
UNLOCKED_GRACE = 600.0  # seconds a payload directory may exist before its lock file does


@dataclass
class StagedTool:
    """One model-visible or runtime-called tool after staging."""

    name: str
    role: str  # tool | driver | hook | skill | shell
    kind: str  # wasm | native | skill | shell
    version: str
    dir: Path
    wasm_path: Path | None = None
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    text: str | None = None  # skill body
    exec_path: Path | None = None  # native: the runtime's copy the sandbox runs (mur.session.native)


@dataclass
class Staged:
    tools: dict[str, StagedTool] = field(default_factory=dict)
    private_dir: Path | None = None
    lock_fd: int = -1  # flock held on private_dir/.owner.lock while the session lives

    def by_role(self, role: str) -> list[StagedTool]:
        return [t for t in self.tools.values() if t.role == role]

    def cleanup(self) -> None:
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
            self.private_dir = None
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1


def payload_root() -> Path:
    return paths.cache_root() / PAYLOADS


def sweep_payloads(root: Path, now: float | None = None) -> list[str]:
    """Remove the payload directories of sessions that are gone: their owner's flock is free (a
    directory without a lock file counts once it is older than any session's start could take)."""
    swept = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return swept
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(os.path.join(entry.path, LOCK), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:  # being created right now, or its owner died before locking
            try:
                if (now or time.time()) - entry.stat(follow_symlinks=False).st_mtime < UNLOCKED_GRACE:
                    continue
            except OSError:
                continue
            fd = -1
        except OSError:
            continue
        try:
            if fd >= 0:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # a live session
        shutil.rmtree(entry.path, ignore_errors=True)
        if fd >= 0:
            os.close(fd)
        swept.append(entry.name)
    return swept


def _private_payload_dir(session_id: str) -> tuple[Path, int]:
    """`<cache root>/payloads/<session id>/` (0700), locked by this process for the session's life."""
    root = payload_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    sweep_payloads(root)
    path = root / session_id
    path.mkdir(mode=0o700)
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return path, fd


def _describe(manifest: Any) -> tuple[str, dict[str, Any]]:
    extra = getattr(manifest, "extra", {}) or {}
    desc = extra.get("description") if isinstance(extra.get("description"), str) else ""
    schema = extra.get("input_schema")
    if isinstance(schema, str):
        try:
            import json

            schema = json.loads(schema)
        except ValueError:
            schema = None
    if not isinstance(schema, dict):
        schema = {"type": "object", "properties": {"input": {"type": "string"}}}
    return desc, schema


def _stage_store(res: ResolvedArtifact, dest: Tree, private: Path) -> StagedTool:
    from mur.artifacts.package import ArchiveError, ArtifactArchive, select_root_wasm

    try:
        archive = ArtifactArchive(res.path.read_bytes())
        archive.extract_all(dest)
        manifest = archive.manifest()
        wasm = None
        kind = "skill" if res.role == "skill" else ("native" if manifest.registry_runtime == "native" else "wasm")
        text = None
        if kind == "wasm":
            entry = select_root_wasm(archive.names)
            wasm = private / f"{res.name}.wasm"
            wasm.write_bytes(archive.read(entry))
        elif kind == "skill" and archive.has("skill.md"):
            text = archive.read("skill.md").decode("utf-8", errors="replace")
    except (ArchiveError, ValueError, OSError) as exc:
        raise MurError(
            "E-IO-003", f"failed to read artifact archive for {res.name}@{res.decl.version}: {exc}"
        ) from exc
    desc, schema = _describe(manifest)
    return StagedTool(res.name, res.role, kind, manifest.version, dest.path, wasm, desc, schema, text)


def _stage_local(res: ResolvedArtifact, dest: Tree, private: Path) -> StagedTool:
    if res.manifest is None:  # a skill file
        text = res.path.read_text(encoding="utf-8", errors="replace")
        dest.write_text("skill.md", text)
        return StagedTool(res.name, res.role, "skill", "local", dest.path, text=text)
    from mur.artifacts.package import PayloadShapeError, select_root_wasm

    manifest = res.manifest
    dest.write_bytes("murmur.yaml", (res.path / "murmur.yaml").read_bytes())
    for rel in manifest.requires_files:
        src = res.path / rel
        if not src.is_file():
            raise MurError("E-IO-001", f"missing required file '{rel}' in {res.path}", "build the artifact first")
        dest.write_bytes(rel, src.read_bytes())
    desc, schema = _describe(manifest)
    kind = "native" if manifest.registry_runtime == "native" else "wasm"
    wasm = None
    if kind == "wasm":
        try:
            entry = select_root_wasm(list(manifest.requires_files))
        except PayloadShapeError as exc:
            raise MurError("E-RUN-004", f"artifact '{res.name}': {exc}", "build the artifact's .wasm first") from exc
        wasm = private / f"{res.name}.wasm"
        shutil.copyfile(res.path / entry, wasm)
    return StagedTool(res.name, res.role, kind, "local", dest.path, wasm, desc, schema)


def _fresh(tools: Tree, name: str) -> Tree:
    """tools/<name>/, emptied of what an earlier run (or its tools) left there."""
    tools.remove_tree(name)
    return tools.subtree(name, create=True)


def stage(resolved: dict[str, ResolvedArtifact], shell_allow: list[str], wd: Workdir) -> Staged:
    """Stage every artifact and shell binary; returns what the dispatcher needs."""
    from mur.sandbox.shell import synthetic_tool_manifest

    staged = Staged()
    try:
        staged.private_dir, staged.lock_fd = _private_payload_dir(wd.session.name)
        with Tree(wd.accessible) as accessible, accessible.subtree("tools", create=True) as tools:
            for res in resolved.values():
                with _fresh(tools, res.name) as dest:
                    stage_one = _stage_store if res.kind == "store" else _stage_local
                    staged.tools[res.name] = stage_one(res, dest, staged.private_dir)
                    if staged.tools[res.name].kind == "native":
                        from mur.session import native

                        staged.tools[res.name].exec_path = native.stage(res, dest, wd.session)
            for binary in shell_allow:
                if binary in staged.tools:
                    raise MurError(
                        "E-MAN-003",
                        f"murmur.yaml: shell binary '{binary}' has the same name as a declared artifact",
                        "rename the artifact or drop the binary from capabilities.shell.allow",
                    )
                manifest = synthetic_tool_manifest(binary)
                with _fresh(tools, binary) as dest:
                    dest.write_text("murmur.yaml", yaml.safe_dump(manifest, sort_keys=False))
                staged.tools[binary] = StagedTool(
                    binary,
                    "shell",
                    "shell",
                    str(manifest.get("version", "0.0.0")),
                    dest.path,
                    description=str(manifest.get("description", "")),
                    input_schema=manifest.get("input_schema") or {"type": "object"},
                )
    except LinkRefused as exc:
        staged.cleanup()
        raise refused(exc, wd.tools) from exc
    except OSError as exc:
        staged.cleanup()
        raise MurError("E-IO-003", f"failed to stage tools: {exc.strerror or exc}") from exc
    except BaseException:
        staged.cleanup()
        raise
    return staged
