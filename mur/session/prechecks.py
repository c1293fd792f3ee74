"""Everything `mur run` checks before a workdir exists, in upstream's order (upstream.md 1.3):

  1. `.env` next to the manifest (unless --no-env-file), then the manifest: E-MAN-*, E-CAP-001/002
     (W-MAN-* as it parses), the config files (E-CFG-003), the mur_version pin (W-RUN-001)
  2. `--explain-scope`: print the staging warnings (W-SEC-006..009) and the report, and stop (exit 0,
     nothing created, even when the floor is unmet)
  3. the containment floor: E-CAP-003
  4. declared artifacts present (E-RUN-008, local sources E-IO-001),
     the inference driver (E-RUN-005/006), `inference.command` on PATH (E-RUN-006), murmur.lock
     (E-RUN-003 / E-REG-002 / E-REG-005), prompt files (E-RUN-009), the capsule component (E-RUN-004),
     an aggregate cgroup bound for subprocess-capable capsules (E-RUN-012)
Nothing here writes to disk except murmur.lock creation (the spec assigns it to `mur run`), and that
only after every other check passed: a refused run leaves nothing behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur import __version__
from mur.errors import MurError, warn
from mur.manifest import LoadedCapsule, load_capsule
from mur.manifest.load import manifest_path
from mur.manifest.config import MurConfig, load_config
from mur.manifest.containment import Floor, check_floor, effective_floor, subprocess_shortfall, view_shortfall
from mur.sandbox.scope import scope_report
from mur.session.options import RunOptions


@dataclass
class CheckedRun:
    """A capsule run that passed every pre-check, with what staging needs."""

    loaded: LoadedCapsule
    options: RunOptions
    config: MurConfig
    floor: Floor
    probe: Any
    achieved: str
    resolved: dict[str, Any] = field(default_factory=dict)  # name -> ResolvedArtifact
    system_prompt: str | None = None
    system_prompt_source: str = "none"
    compaction_prompt: str | None = None
    capsule_wasm: Path | None = None
    process_command: str | None = None


def load_env_file(manifest: Path) -> None:
    """Load `.env` beside the manifest into the environment; existing variables win."""
    path = manifest.parent / ".env"
    try:
        if not path.is_file():
            return
    except PermissionError:  # an unsearchable manifest directory: reading the manifest reports it (E-IO-002)
        return
    from dotenv import dotenv_values

    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise MurError("E-IO-003", f"cannot read env file {path}: {exc}") from exc
    for key, value in values.items():
        if value is not None and key not in os.environ:
            os.environ[key] = value


def probe():
    """The host probe (lazy import keeps `mur --help` fast)."""
    from mur.sandbox.probe import probe_host

    return probe_host()


def load_and_scope(opts: RunOptions) -> tuple[LoadedCapsule, MurConfig, Floor, Any]:
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


def explain_probed(opts: RunOptions) -> tuple[dict[str, Any], Any]:
    """`explain`, and the host probe the report was computed from."""
    loaded, _config, floor, host = load_and_scope(opts)
    loaded.emit_stage_warnings()
    return scope_report(loaded.capsule, floor, host), host


def explain_inputs(opts: RunOptions) -> list[Path]:
    """Every file `explain` reads, present or not (besides the host probe's): the manifest, the
    `.env` beside it, the global and the project config file. A remembered report
    (mur.session.explain_memo) holds while these, the process and the probe are unchanged: a new
    input of load_and_scope belongs here too."""
    from mur.manifest.config import global_config_path, project_config_path

    manifest = manifest_path(opts.manifest)
    found = [manifest]
    if not opts.no_env_file:
        found.append(manifest.parent / ".env")
    return found + [global_config_path(), project_config_path()]


def prepare(opts: RunOptions) -> CheckedRun:
    """Run every pre-check; raises MurError on the first failure, before any workdir exists."""
    loaded, config, floor, host = load_and_scope(opts)
    capsule = loaded.capsule
    achieved = check_floor(floor, host, capsule.capabilities.filesystem.workdir_exec,
                           subprocess_shortfall(capsule.capabilities, host), view_shortfall(capsule.capabilities))
    prep = CheckedRun(loaded, opts, config, floor, host, achieved)
    from mur.resolve.capsule import resolve_loaded
    from mur.session import launch_checks as checks

    prep.resolved = dict(resolve_loaded(loaded).artifacts)
    checks.check_inference(prep)
    checks.check_lock(prep)
    checks.read_prompts(prep)
    checks.check_capsule_component(prep)
    checks.check_subprocess_bound(prep)
    checks.check_lock(prep, create=True)  # the only write, after every check passed
    return prep
