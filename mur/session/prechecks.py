"""Everything `mur run` checks before a workdir exists, in upstream's order (upstream.md 1.3):

  1. `.env` next to the manifest (unless --no-env-file), then the manifest: E-MAN-*, E-CAP-001/002
     (W-MAN-* as it parses), the config files (E-CFG-003), the mur_version pin (W-RUN-001)
  2. `--explain-scope`: print the staging warnings (W-SEC-006..009) and the report, and stop (exit 0,
     nothing created, even when the floor is unmet)
  3. the containment floor: E-CAP-003
  4. declared artifacts present (E-RUN-008, local sources E-IO-001),
     at the versions murmur.lock pins (E-RUN-003 for a declared artifact it lacks; mur.session.lockpins),
     the inference driver (E-RUN-005/006), `inference.command` on PATH (E-RUN-006), murmur.lock
     (E-RUN-003 / E-REG-002 / E-REG-005), prompt files (E-RUN-009), the capsule component (E-RUN-004),
     an aggregate cgroup bound for subprocess-capable capsules (E-RUN-012)
Nothing here writes to disk except murmur.lock creation (the spec assigns it to `mur run`), and that
only after every other check passed: a refused run leaves nothing behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mur import __version__
from mur.errors import MurError, warn
from mur.manifest import LoadedCapsule, load_capsule
from mur.paths import manifest_path
from mur.manifest.config import MurConfig, load_config
from mur.manifest.containment import Floor, check_floor, effective_floor, subprocess_shortfall, view_shortfall
from mur.session.launch_checks import Prompts, needs_subprocesses
from mur.session.options import RunOptions

if TYPE_CHECKING:
    from mur.manifest.capsule import Capsule
    from mur.resolve.capsule import ResolvedCapsule
    from mur.sandbox.probe import HostProbe


@dataclass(frozen=True)
class CheckedRun:
    """A capsule run that passed every pre-check: what was decided before anything exists on disk,
    and all that staging and the session need (nothing here is resolved again)."""

    loaded: LoadedCapsule  # with murmur.lock's versions (mur.session.lockpins)
    options: RunOptions
    config: MurConfig
    floor: Floor
    probe: HostProbe
    achieved: str  # the containment class the host enforces for this capsule
    resolved: ResolvedCapsule  # where every artifact and referenced file is (located, not hashed)
    prompts: Prompts
    capsule_wasm: Path | None = None  # a plain capsule's own component
    process_command: str | None = None  # the process transport's command, as found on PATH

    @property
    def capsule(self) -> Capsule:
        return self.loaded.capsule

    @property
    def subprocesses(self) -> bool:
        """Can this run spawn native subprocesses (so it needs the shell sandbox)?"""
        return needs_subprocesses(self.resolved)


def load_env_file(manifest: Path) -> None:
    """Load `.env` beside the manifest into the environment; existing variables win."""
    path = manifest.parent / ".env"
    try:
        if not path.is_file():
            return
    except PermissionError:  # an unsearchable manifest directory: reading the manifest reports it (E-IO-002)
        return
    from mur.resolve.env import parse

    try:
        values = parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise MurError("E-IO-003", f"cannot read env file {path}: {exc}") from exc
    for key, value in values.items():
        if key not in os.environ:
            os.environ[key] = value


def probe() -> HostProbe:
    """The host probe (lazy import keeps `mur --help` fast)."""
    from mur.sandbox.probe import probe_host

    return probe_host()


def load_and_scope(opts: RunOptions) -> tuple[LoadedCapsule, MurConfig, Floor, HostProbe]:
    """Steps 1-2: parse + validate the manifest, merge config, compute the declared floor, probe."""
    manifest = manifest_path(opts.manifest)  # `-m DIR` means DIR/murmur.yaml, as for `mur build DIR`
    if not opts.no_env_file:
        load_env_file(manifest)
    loaded = load_capsule(manifest)
    config = load_config()
    capsule = loaded.capsule
    if capsule.mur_version and capsule.mur_version != __version__:
        warn(
            "W-RUN-001",
            f"manifest requires mur {capsule.mur_version} but you are running mur {__version__}",
        )
    floor = effective_floor(capsule.capabilities.containment, config.containment, opts.containment)
    return loaded, config, floor, probe()


def explain(opts: RunOptions) -> dict[str, Any]:
    """`mur run --explain-scope`: the report, computed without creating anything.

    The staging warnings (W-SEC-006..009) are printed here too: they describe the grant set the
    report is about, and this is the one place an operator reads it without launching."""
    return explain_probed(opts)[0]


def explain_probed(opts: RunOptions) -> tuple[dict[str, Any], HostProbe]:
    """`explain`, and the host probe the report was computed from."""
    from mur.sandbox.scope import scope_report

    loaded, _config, floor, host = load_and_scope(opts)
    loaded.emit_stage_warnings()
    return scope_report(loaded.capsule, floor, host), host


def prepare(opts: RunOptions) -> CheckedRun:
    """Run every pre-check; raises MurError on the first failure, before any workdir exists."""
    loaded, config, floor, host = load_and_scope(opts)
    from mur.resolve.capsule import resolve_loaded
    from mur.session import launch_checks as checks
    from mur.session.lockpins import pinned

    caps = loaded.capsule.capabilities
    checks.check_system_prompt_flag(opts.system_prompt, loaded.capsule)
    achieved = check_floor(floor, host, caps.filesystem.workdir_exec, subprocess_shortfall(caps, host),
                           view_shortfall(caps))
    loaded = pinned(loaded)  # murmur.lock's versions
    capsule = loaded.capsule
    resolved = resolve_loaded(loaded, hashed=False)  # a run needs where things are, not their digests
    process_command = checks.check_inference(capsule, resolved.artifacts)
    checks.check_lock(resolved)
    prompts = checks.read_prompts(opts.system_prompt, resolved)
    capsule_wasm = checks.check_capsule_component(resolved)
    checks.check_subprocess_bound(resolved, host)
    checks.check_lock(resolved, create=True)  # the only write, after every check passed
    return CheckedRun(loaded, opts, config, floor, host, achieved, resolved, prompts, capsule_wasm, process_command)
