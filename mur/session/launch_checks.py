"""`mur run`'s launch checks that need the resolved capsule (mur.resolve): the inference driver or
CLI, murmur.lock, the prompt files, the capsule component, an aggregate cgroup bound. Each raises
the spec's code; mur.session.prechecks runs them in upstream's order."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.resolve.artifacts import find_skill_md


def check_inference(prep: Any) -> None:
    """E-RUN-005 (no driver configured/declared), E-RUN-006 (driver not installed, CLI not on PATH)."""
    inf = prep.loaded.capsule.inference
    if inf is None:
        return
    if inf.transport == "process":
        command = inf.effective_command
        found = shutil.which(command)
        if found is None:
            raise MurError(
                "E-RUN-006",
                f"inference.command '{command}' was not found on PATH",
                "install the claude CLI (`npm install -g @anthropic-ai/claude-code`) or set inference.command "
                "to a binary on PATH",
            )
        prep.process_command = found
        return
    name = inf.driver_artifact
    if name is None:
        raise MurError(
            "E-RUN-005",
            "inference driver is not configured; add inference.driver.artifact to murmur.yaml",
            "add an inference.driver.artifact field naming the driver artifact to use",
        )
    decl = prep.loaded.capsule.artifact(name)
    if decl is None or decl.runtime != "driver":
        raise MurError(
            "E-RUN-005",
            f"inference driver '{name}' is not declared in artifacts: with runtime: driver",
            f"add an artifacts: entry `- {{name: {name}, version: ..., runtime: driver}}`",
        )
    if name not in prep.resolved:
        raise MurError(
            "E-RUN-006",
            f"inference driver '{name}' is not installed in the local tool registry",
            f"run `mur install {name}@{decl.version}`",
        )


def check_lock(prep: Any, create: bool = False) -> None:
    """murmur.lock: verified (never refreshed) for store artifacts; `create`: written when absent."""
    installed = [r.installed for r in prep.resolved.values() if r.kind == "store"]
    if installed:
        from mur.artifacts.installed import check_lock_for_run

        check_lock_for_run(prep.loaded.dir, installed, create=create)


def _read_prompt(path_text: str, base: Path, field: str) -> str:
    path = Path(path_text)
    path = path if path.is_absolute() else base / path
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise MurError(
            "E-RUN-009",
            f"failed to read {field} at {path}: {reason}",
            f"fix {field} (relative to the directory holding murmur.yaml)",
        ) from exc


def check_system_prompt_flag(prep: Any) -> None:
    """`--system-prompt` needs an agent capsule (upstream: E-IO-003, before anything is staged)."""
    if prep.options.system_prompt is not None and prep.loaded.capsule.inference is None:
        raise MurError(
            "E-IO-003",
            "--system-prompt requires an agent capsule: this manifest has no inference: block",
            "add an inference: block to murmur.yaml, or drop --system-prompt",
        )


def read_prompts(prep: Any) -> None:
    """Read system_prompt_file / the prompt artifact / the compaction prompt file (E-RUN-009).

    `--system-prompt` replaces all three manifest forms (none of them is read, so a missing file
    cannot fail a launch told not to use it); it is trimmed, and an all-whitespace value clears the
    prompt: still the CLI's choice (source "cli"), with no text. A skill used as the prompt is
    `bound_skill`: not separately callable, marked so in MURMUR.md."""
    inf = prep.loaded.capsule.inference
    if prep.options.system_prompt is not None:
        prep.system_prompt = prep.options.system_prompt.strip() or None
        prep.system_prompt_source = "cli"
    if inf is None:
        return
    base = prep.loaded.dir
    if prep.system_prompt_source != "cli":
        if inf.system_prompt is not None:
            prep.system_prompt, prep.system_prompt_source = inf.system_prompt, "manifest"
        elif inf.system_prompt_file is not None:
            prep.system_prompt = _read_prompt(inf.system_prompt_file, base, "inference.system_prompt_file")
            prep.system_prompt_source = "manifest"
        elif inf.system_prompt_artifact is not None:
            prep.system_prompt = _prompt_artifact_text(prep, inf.system_prompt_artifact)
            prep.system_prompt_source = "manifest"
            prep.bound_skill = inf.system_prompt_artifact
    comp = inf.compaction
    if comp is not None:
        if comp.system_prompt is not None:
            prep.compaction_prompt = comp.system_prompt
        elif comp.system_prompt_file is not None:
            prep.compaction_prompt = _read_prompt(
                comp.system_prompt_file, base, "inference.compaction.system_prompt_file"
            )


def _prompt_artifact_text(prep: Any, name: str) -> str:
    res = prep.resolved.get(name)
    try:
        if res is None:
            raise FileNotFoundError("not resolved")
        if res.kind == "local" and res.path.is_file():
            return res.path.read_text(encoding="utf-8")
        if res.kind == "local":
            skill = find_skill_md(res.path)
            if skill is None:
                raise FileNotFoundError("no skill.md")
            return skill.read_text(encoding="utf-8")
        from mur.artifacts.package import ArtifactArchive

        archive = ArtifactArchive(res.path.read_bytes())
        return archive.read("skill.md").decode("utf-8")
    except Exception as exc:  # noqa: BLE001 - any failure here is the one E-RUN-009 case
        raise MurError(
            "E-RUN-009",
            f"inference.system_prompt_artifact '{name}': skill.md not found or unreadable ({exc}); "
            "ensure the skill is declared in artifacts: and was staged",
        ) from exc


def check_capsule_component(prep: Any) -> None:
    """A capsule without an inference block runs its own component: `capsule.wasm` beside murmur.yaml."""
    if prep.loaded.capsule.inference is not None:
        return
    path = prep.loaded.dir / "capsule.wasm"
    if not path.is_file():
        raise MurError(
            "E-RUN-004",
            f"capsule wasm not found at {path}",
            "a capsule without an `inference:` block runs its own component: build it to capsule.wasm next to "
            "murmur.yaml (for the examples: scripts/build-examples), or add an inference block",
        )
    prep.capsule_wasm = path


def needs_subprocesses(prep: Any) -> bool:
    """Can this capsule spawn native subprocesses (shell.allow, spawn.allow, a native tool)?"""
    caps = prep.loaded.capsule.capabilities
    return bool(caps.shell_allow or caps.spawn_allow or any(r.is_native for r in prep.resolved.values()))


def check_subprocess_bound(prep: Any) -> None:
    """E-RUN-012: on Linux a subprocess-capable capsule needs an aggregate (cgroup) bound."""
    host = prep.probe
    if not needs_subprocesses(prep) or host.os != "linux":
        return
    if host.cgroup_delegated:
        return
    from mur.sandbox.enclosing import E012_HINT, unmet

    resources = prep.loaded.capsule.capabilities.resources
    why = unmet(getattr(host, "enclosing", None), resources.cgroup_memory_bytes, resources.cgroup_pids_max)
    if why is not None:
        raise MurError(
            "E-RUN-012",
            f"no cgroup could be created for this capsule's subprocess tree (cgroup mode: {host.cgroup_mode}), "
            f"{why}; running shell tools with no aggregate memory/pids ceiling is refused", E012_HINT,
        )
