"""`mur run`'s launch checks that need the resolved capsule (mur.resolve): the inference driver or
CLI, murmur.lock, the prompt files, the capsule component, an aggregate cgroup bound. Each raises
the spec's code or returns what it found; mur.session.prechecks runs them in upstream's order and
keeps what they found in the CheckedRun."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mur.errors import MurError

if TYPE_CHECKING:
    from mur.manifest.capsule import Capsule
    from mur.resolve.capsule import ResolvedCapsule
    from mur.sandbox.probe import HostProbe


@dataclass(frozen=True)
class Prompts:
    """The prompts a run uses, read once before anything is staged (E-RUN-009)."""

    system: str | None = None
    source: str = "none"  # none | manifest | cli
    compaction: str | None = None
    bound_skill: str | None = None  # the skill artifact used as the system prompt


def check_inference(capsule: Capsule, artifacts: Mapping[str, object]) -> str | None:
    """E-RUN-005 (no driver configured/declared), E-RUN-006 (driver not installed, CLI not on PATH);
    returns the process transport's command as found on PATH (None for the http transport).
    `artifacts`: the resolved capsule's (ResolvedCapsule.artifacts)."""
    inf = capsule.inference
    if inf is None:
        return None
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
        return found
    name = inf.driver_artifact
    if name is None:
        raise MurError(
            "E-RUN-005",
            "inference driver is not configured; add inference.driver.artifact to murmur.yaml",
            "add an inference.driver.artifact field naming the driver artifact to use",
        )
    decl = capsule.artifact(name)
    if decl is None or decl.runtime != "driver":
        raise MurError(
            "E-RUN-005",
            f"inference driver '{name}' is not declared in artifacts: with runtime: driver",
            f"add an artifacts: entry `- {{name: {name}, version: ..., runtime: driver}}`",
        )
    if name not in artifacts:
        raise MurError(
            "E-RUN-006",
            f"inference driver '{name}' is not installed in the local tool registry",
            f"run `mur install {name}@{decl.version}`",
        )
    return None


def check_lock(resolved: ResolvedCapsule, create: bool = False) -> None:
    """murmur.lock: verified (never refreshed) for store artifacts; `create`: written when absent."""
    installed = [r.installed for r in resolved.store_artifacts()]
    if installed:
        from mur.artifacts.installed import check_lock_for_run

        check_lock_for_run(resolved.dir, installed, create=create)


def _read_prompt(resolved: ResolvedCapsule, field: str) -> str:
    path = resolved.referenced[field]  # where the resolver found it (relative to murmur.yaml's directory)
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise MurError(
            "E-RUN-009",
            f"failed to read {field} at {path}: {reason}",
            f"fix {field} (relative to the directory holding murmur.yaml)",
        ) from exc


def check_system_prompt_flag(system_prompt: str | None, capsule: Capsule) -> None:
    """`--system-prompt` needs an agent capsule (upstream: E-IO-003, before anything is staged)."""
    if system_prompt is not None and capsule.inference is None:
        raise MurError(
            "E-IO-003",
            "--system-prompt requires an agent capsule: this manifest has no inference: block",
            "add an inference: block to murmur.yaml, or drop --system-prompt",
        )


def read_prompts(cli_prompt: str | None, resolved: ResolvedCapsule) -> Prompts:
    """Read system_prompt_file / the prompt artifact / the compaction prompt file (E-RUN-009).

    `--system-prompt` (`cli_prompt`) replaces all three manifest forms (none of them is read, so a
    missing file cannot fail a launch told not to use it); it is trimmed, and an all-whitespace value
    clears the prompt: still the CLI's choice (source "cli"), with no text. A skill used as the prompt
    is `bound_skill`: not separately callable, marked so in MURMUR.md. The files are where the resolver
    located them (ResolvedCapsule.referenced, .artifacts); only their text is read here."""
    inf = resolved.capsule.inference
    system, source, bound = None, "none", None
    if cli_prompt is not None:
        system, source = cli_prompt.strip() or None, "cli"
    if inf is None:
        return Prompts(system, source)
    if source != "cli":
        if inf.system_prompt is not None:
            system, source = inf.system_prompt, "manifest"
        elif inf.system_prompt_file is not None:
            system, source = _read_prompt(resolved, "inference.system_prompt_file"), "manifest"
        elif inf.system_prompt_artifact is not None:
            system, source = _prompt_artifact_text(resolved, inf.system_prompt_artifact), "manifest"
            bound = inf.system_prompt_artifact
    compaction = None
    comp = inf.compaction
    if comp is not None:
        if comp.system_prompt is not None:
            compaction = comp.system_prompt
        elif comp.system_prompt_file is not None:
            compaction = _read_prompt(resolved, "inference.compaction.system_prompt_file")
    return Prompts(system, source, compaction, bound)


def _prompt_artifact_text(resolved: ResolvedCapsule, name: str) -> str:
    res = resolved.artifacts.get(name)
    try:
        if res is None:
            raise FileNotFoundError("not resolved")
        if res.kind == "local" and res.path.is_file():
            return res.path.read_text(encoding="utf-8")
        if res.kind == "local":
            from mur.resolve.artifacts import find_skill_md

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


def check_capsule_component(resolved: ResolvedCapsule) -> Path | None:
    """A capsule without an inference block runs its own component: `capsule.wasm` beside murmur.yaml
    (E-RUN-004 when the resolver found none); returns its path (None for an agent capsule)."""
    if resolved.capsule.inference is not None:
        return None
    found = resolved.sibling("capsule.wasm")
    if found is None:
        import shlex

        from mur.humanize import shown_path

        raise MurError(
            "E-RUN-004",
            f"capsule wasm not found at {resolved.dir / 'capsule.wasm'}",
            "a capsule without an `inference:` block runs its own component: build it with "
            f"`mur build {shlex.quote(shown_path(resolved.dir))}` (capsule.wasm next to murmur.yaml; for this repository's "
            "examples: scripts/build-examples), or add an inference block",
        )
    return Path(found.src)


def needs_subprocesses(resolved: ResolvedCapsule) -> bool:
    """Can this capsule spawn native subprocesses (shell.allow, spawn.allow, a native tool)?"""
    caps = resolved.capsule.capabilities
    return bool(caps.shell_allow or caps.spawn_allow or any(r.is_native for r in resolved.artifacts.values()))


def check_subprocess_bound(resolved: ResolvedCapsule, host: HostProbe) -> None:
    """E-RUN-012: on Linux a subprocess-capable capsule needs an aggregate (cgroup) bound."""
    if not needs_subprocesses(resolved) or host.os != "linux":
        return
    caps = resolved.capsule.capabilities
    if host.cgroup_delegated:
        return
    from mur.sandbox.enclosing import E012_HINT, unmet

    resources = caps.resources
    why = unmet(getattr(host, "enclosing", None), resources.cgroup_memory_bytes, resources.cgroup_pids_max)
    if why is not None:
        raise MurError(
            "E-RUN-012",
            f"no cgroup could be created for this capsule's subprocess tree (cgroup mode: {host.cgroup_mode}), "
            f"{why}; running shell tools with no aggregate memory/pids ceiling is refused", E012_HINT,
        )
