"""Staging: lay each resolved artifact out under `tools/<name>/` and write MURMUR.md.

  * a store artifact's `.mur.zip` is unpacked (zip-slip guarded) into tools/<name>/;
  * a local-source artifact directory has its murmur.yaml and requires_files copied there;
  * a skill becomes tools/<name>/skill.md (local skills installed as lowercase skill.md);
  * each `capabilities.shell.allow` binary gets a synthetic tools/<bin>/murmur.yaml.
tools/ is in the tools' workdir, so every write there goes through mur.fsafe (a previous run's tools
may have left links).

A wasm artifact's payload (its root .wasm) is not copied into tools/: wasmtime never compiles a file
a tool could change, and guests (the runtime's uid, often root) can write anywhere in the workdir,
so a copy there would only cost 18 MB a run, and a hard link to a shared file would let a guest
write through it. What the engine compiles (mur.wasm.sources): a store payload is kept once per
content in the engine's private cache (`<cache>/wasm/<sha256>.wasm`); a local source is read and
hashed by the engine itself. A session copies no payload and leaves none behind.

Only when the engine's cache is not private (not ours, or writable by others) does a store payload
go to a runtime-private directory of its own, `<cache root>/payloads/<session id>/` (0700, outside
every tree a tool can write), removed at session end; one left by a killed run is swept by the next
that needs one. Each is flock()ed by its live owner, and is locked before it is visible under its
name: it is made as `.new-<session id>`, its lock file created and locked inside, then renamed. A
sweep removes only a named directory whose lock is free (its owner is gone), and a `.new-*` one
only once it is older than any start could take.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur import paths
from mur.errors import MurError
from mur.fsafe import LinkRefused, Tree
from mur.fsutil import mark_used
from mur.resolve.artifacts import ResolvedArtifact
from mur.session.workdir import Workdir, refused

PAYLOADS = "payloads"
LOCK = ".owner.lock"
NEW = ".new-"  # a payload directory being made: locked inside, not yet named
UNLOCKED_GRACE = 600.0  # seconds a payload directory may exist unnamed (or unlocked, from an older mur)


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
    private_dir: Path | None = None  # made on first use (private()), when something needs it
    lock_fd: int = -1  # flock held on private_dir/.owner.lock while the session lives
    session_id: str = ""

    def by_role(self, role: str) -> list[StagedTool]:
        return [t for t in self.tools.values() if t.role == role]

    def private(self) -> Path:
        """This session's runtime-private directory (made and locked now if it is not yet)."""
        if self.private_dir is None:
            self.private_dir, self.lock_fd = _private_payload_dir(self.session_id)
        return self.private_dir

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
    """Remove the payload directories of sessions that are gone: a named one whose owner's flock is
    free (it was locked before it got its name, so a free lock means its owner is gone), and a
    `.new-*` one (or a named one without its lock file, left by an older mur) once it is older than
    any session's start could take."""
    swept = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return swept
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        fd = -1
        if not entry.name.startswith(NEW):
            try:
                fd = os.open(os.path.join(entry.path, LOCK), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                fd = -1
            except OSError:
                continue
        if fd < 0 and not _older_than_grace(entry, now):
            continue  # being made right now (or its owner died before naming it: swept later)
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


def _older_than_grace(entry: os.DirEntry, now: float | None) -> bool:
    try:
        return (now or time.time()) - entry.stat(follow_symlinks=False).st_mtime >= UNLOCKED_GRACE
    except OSError:
        return False


def _private_payload_dir(session_id: str) -> tuple[Path, int]:
    """`<cache root>/payloads/<session id>/` (0700), locked by this process for the session's life.

    Locked before it is visible under that name (made as `.new-<id>`, locked, renamed): a sweep by
    another capsule starting at the same moment can never find it unlocked."""
    root = payload_root()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    sweep_payloads(root)
    path, new = root / session_id, root / f"{NEW}{session_id}"
    new.mkdir(mode=0o700)
    try:
        fd = os.open(new / LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(new, path)
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
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


def _stage_store(res: ResolvedArtifact, dest: Tree, staged: Staged) -> StagedTool:
    from mur.artifacts.package import ArchiveError, ArtifactArchive, select_root_wasm

    try:
        data = res.path.read_bytes()
        archive = ArtifactArchive(data)
        manifest = archive.manifest()
        wasm = None
        kind = "skill" if res.role == "skill" else ("native" if manifest.registry_runtime == "native" else "wasm")
        text = None
        if kind == "wasm":
            entry = select_root_wasm(archive.names)
            archive.extract_all(dest, skip={entry})
            wasm = _store_payload(res.name, hashlib.sha256(data).hexdigest(), entry, archive, staged)
        else:
            archive.extract_all(dest)
            if kind == "skill" and archive.has("skill.md"):
                text = archive.read("skill.md").decode("utf-8", errors="replace")
    except (ArchiveError, ValueError, OSError) as exc:
        raise MurError(
            "E-IO-003", f"failed to read artifact archive for {res.name}@{res.decl.version}: {exc}"
        ) from exc
    desc, schema = _describe(manifest)
    return StagedTool(res.name, res.role, kind, manifest.version, dest.path, wasm, desc, schema, text)


def _store_payload(name: str, archive_sha256: str, entry: str, archive: Any, staged: Staged) -> Path:
    """What the engine compiles for a store artifact's payload: its kept source in the engine's
    cache (unpacked once per content; not even read when this archive's entry was seen before),
    or, where that cache is not private or cannot be written, a copy in this session's private
    directory."""
    from mur.wasm import sources
    from mur.wasm.compile import private_cache_dir
    from mur.wasm.engine import default_cache_dir

    cache = default_cache_dir()
    payload = None
    if private_cache_dir(cache):
        digest = sources.remembered_entry(archive_sha256, entry)
        kept = sources.trusted_kept(cache, digest) if digest is not None else None
        if kept is not None:
            mark_used(kept)
            return kept
        payload = archive.read(entry)
        digest = hashlib.sha256(payload).hexdigest()
        try:
            kept = sources.keep(cache, payload, digest)
        except OSError:  # a cache we may read but not write (an image's read-only root filesystem)
            kept = None
        if kept is not None:
            sources.remember_entry(archive_sha256, entry, digest)
            return kept
    private = staged.private() / f"{name}.wasm"
    private.write_bytes(payload if payload is not None else archive.read(entry))
    return private


def _stage_local(res: ResolvedArtifact, dest: Tree, staged: Staged) -> StagedTool:
    if res.manifest is None:  # a skill file
        text = res.path.read_text(encoding="utf-8", errors="replace")
        dest.write_text("skill.md", text, durable=False)
        return StagedTool(res.name, res.role, "skill", "local", dest.path, text=text)
    from mur.artifacts.package import PayloadShapeError, select_root_wasm

    manifest = res.manifest
    desc, schema = _describe(manifest)
    kind = "native" if manifest.registry_runtime == "native" else "wasm"
    entry = None
    if kind == "wasm":
        try:
            entry = select_root_wasm(list(manifest.requires_files))
        except PayloadShapeError as exc:
            raise MurError("E-RUN-004", f"artifact '{res.name}': {exc}", "build the artifact's .wasm first") from exc
    dest.write_bytes("murmur.yaml", (res.path / "murmur.yaml").read_bytes(), durable=False)
    for rel in manifest.requires_files:
        src = res.path / rel
        if not src.is_file():
            raise MurError("E-IO-001", f"missing required file '{rel}' in {res.path}", "build the artifact first")
        if rel != entry:  # the payload: the engine reads (and hashes) it where it is
            dest.write_bytes(rel, src.read_bytes(), durable=False)
    wasm = res.path / entry if entry is not None else None
    return StagedTool(res.name, res.role, kind, "local", dest.path, wasm, desc, schema)


def _fresh(tools: Tree, name: str) -> Tree:
    """tools/<name>/, emptied of what an earlier run (or its tools) left there."""
    tools.remove_tree(name)
    return tools.subtree(name, create=True)


def stage(resolved: Mapping[str, ResolvedArtifact], shell_allow: list[str], wd: Workdir) -> Staged:
    """Stage every artifact and shell binary; returns what the dispatcher needs."""
    staged = Staged(session_id=wd.session.name)
    try:
        with Tree(wd.accessible) as accessible, accessible.subtree("tools", create=True) as tools:
            for res in resolved.values():
                with _fresh(tools, res.name) as dest:
                    stage_one = _stage_store if res.kind == "store" else _stage_local
                    staged.tools[res.name] = stage_one(res, dest, staged)
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
                import yaml

                from mur.sandbox.shell import synthetic_tool_manifest

                manifest = synthetic_tool_manifest(binary)
                with _fresh(tools, binary) as dest:
                    dest.write_text("murmur.yaml", yaml.safe_dump(manifest, sort_keys=False), durable=False)
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
