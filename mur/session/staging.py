"""Staging: lay each resolved artifact out under `tools/<name>/` and write MURMUR.md.

  * a store artifact's `.mur.zip` is unpacked (zip-slip guarded) into tools/<name>/;
  * a local-source artifact directory has its murmur.yaml and requires_files copied there;
  * a skill becomes tools/<name>/skill.md (local skills installed as lowercase skill.md);
  * each `capabilities.shell.allow` binary gets a synthetic tools/<bin>/murmur.yaml.
The wasm a guest runs is NOT the staged copy: guests can write the workdir, so each payload is also
copied into a runtime-private directory outside it, and that copy is what wasmtime compiles.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mur.errors import MurError
from mur.resolve.artifacts import ResolvedArtifact
from mur.session.workdir import Workdir


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


@dataclass
class Staged:
    tools: dict[str, StagedTool] = field(default_factory=dict)
    private_dir: Path | None = None

    def by_role(self, role: str) -> list[StagedTool]:
        return [t for t in self.tools.values() if t.role == role]

    def cleanup(self) -> None:
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
            self.private_dir = None


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


def _stage_store(res: ResolvedArtifact, dest: Path, private: Path) -> StagedTool:
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
    return StagedTool(res.name, res.role, kind, manifest.version, dest, wasm, desc, schema, text)


def _stage_local(res: ResolvedArtifact, dest: Path, private: Path) -> StagedTool:
    if res.manifest is None:  # a skill file
        text = res.path.read_text(encoding="utf-8", errors="replace")
        (dest / "skill.md").write_text(text, encoding="utf-8")
        return StagedTool(res.name, res.role, "skill", "local", dest, text=text)
    from mur.artifacts.package import PayloadShapeError, select_root_wasm

    manifest = res.manifest
    shutil.copyfile(res.path / "murmur.yaml", dest / "murmur.yaml")
    for rel in manifest.requires_files:
        src = res.path / rel
        if not src.is_file():
            raise MurError("E-IO-001", f"missing required file '{rel}' in {res.path}", "build the artifact first")
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest / rel)
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
    return StagedTool(res.name, res.role, kind, "local", dest, wasm, desc, schema)


def stage(resolved: dict[str, ResolvedArtifact], shell_allow: list[str], wd: Workdir) -> Staged:
    """Stage every artifact and shell binary; returns what the dispatcher needs."""
    from mur.sandbox.shell import synthetic_tool_manifest

    staged = Staged(private_dir=Path(tempfile.mkdtemp(prefix="mur-payloads-")))
    try:
        for res in resolved.values():
            dest = wd.tools / res.name
            dest.mkdir(parents=True, exist_ok=True)
            if res.kind == "store":
                tool = _stage_store(res, dest, staged.private_dir)
            else:
                tool = _stage_local(res, dest, staged.private_dir)
            staged.tools[res.name] = tool
        for binary in shell_allow:
            if binary in staged.tools:
                raise MurError(
                    "E-MAN-003",
                    f"murmur.yaml: shell binary '{binary}' has the same name as a declared artifact",
                    "rename the artifact or drop the binary from capabilities.shell.allow",
                )
            dest = wd.tools / binary
            dest.mkdir(parents=True, exist_ok=True)
            manifest = synthetic_tool_manifest(binary)
            (dest / "murmur.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
            staged.tools[binary] = StagedTool(
                binary,
                "shell",
                "shell",
                str(manifest.get("version", "0.0.0")),
                dest,
                description=str(manifest.get("description", "")),
                input_schema=manifest.get("input_schema") or {"type": "object"},
            )
    except OSError as exc:
        staged.cleanup()
        raise MurError("E-IO-003", f"failed to stage tools: {exc.strerror or exc}") from exc
    except BaseException:
        staged.cleanup()
        raise
    return staged
