"""A shell tool's environment and its synthetic tool manifest (upstream section 7).

The environment is upstream's rules (baseline names, ``baseline_env`` / ``strip_env`` globs, the
credential backstop, HOME in the workdir); ``session_env`` computes the part that is the same for
every call of a session once, ``call_env`` adds a call's own names to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from mur.fsafe import Tree
from mur.sandbox import policy as pol
from mur.sandbox.output import OUTPUT_LIMIT
from mur.secrets import is_credential_name, matches_any

BASELINE_ENV = ("PATH", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "TEMP", "TMP", "CARGO_HOME", "RUSTUP_HOME", "TERM")
CAPSULE_HOME = ".capsule-home"


def shell_env(caps: Any, workdir: Path, host_env: Mapping[str, str]) -> dict[str, str]:
    """Upstream's rules: baseline names + baseline_env globs, minus strip_env globs and credentials,
    then HOME (and USERPROFILE) forced to ``<workdir>/.capsule-home``. strip_env and the
    credential backstop win over baseline_env."""
    shell = caps.shell
    keep = list(shell.baseline_env) if shell else []
    strip = list(shell.strip_env) if shell else []
    env = {
        k: v for k, v in host_env.items()
        if (k in BASELINE_ENV or matches_any(k, keep)) and not matches_any(k, strip) and not is_credential_name(k)
    }
    home = str(Path(workdir).absolute() / CAPSULE_HOME)
    env["HOME"] = home
    env["USERPROFILE"] = home
    return env


def synthetic_tool_manifest(binary: str) -> dict:
    """The tool manifest staged at ``tools/<bin>/murmur.yaml`` for one allowed binary (upstream section 7)."""
    if binary in pol.SHELLS:
        how = f"`command` is a script run as `{binary} -c <command>` in the session workdir."
    else:
        how = f"`command` is split like a shell would (no expansion) into the arguments of `{binary}`."
    return {
        "name": binary,
        "version": "0.0.0",
        "runtime": "tool",
        "implementation": "native",
        "description": f"Run the host binary `{binary}` (allowed by capabilities.shell.allow). {how} "
                       f"Output beyond {OUTPUT_LIMIT // 1024} KiB per stream is cut; the full log path is returned.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    }


def write_synthetic_tool_manifests(tools_dir: Path, allow: Iterable[str]) -> list[Path]:
    """Write ``<tools_dir>/<bin>/murmur.yaml`` for each binary (atomically, never through a link);
    returns the paths."""
    import yaml

    written = []
    with Tree(tools_dir, create=True) as tools:
        for binary in allow:
            tools.write_text(f"{binary}/murmur.yaml", yaml.safe_dump(synthetic_tool_manifest(binary), sort_keys=False))
            written.append(Path(tools_dir) / binary / "murmur.yaml")
    return written


def session_env(caps: Any, workdir: Path, host_env: Mapping[str, str], network: pol.NetworkPlan) -> dict[str, str]:
    """What every call's environment starts from: fixed for the session, so computed once."""
    base = shell_env(caps, workdir, host_env)
    for name in pol.NO_PROXY_NAMES:
        base.pop(name, None)
    base.update(pol.proxy_env(network))
    return base


def call_env(base: Mapping[str, str], caps: Any, extra: Mapping[str, str]) -> dict[str, str]:
    """The session's environment plus the call's own names; never HOME, a credential or a strip_env name."""
    run_env = dict(base)
    strip = list(caps.shell.strip_env) if caps.shell else []
    run_env.update({k: v for k, v in extra.items() if k not in ("HOME", "USERPROFILE")})
    for name in [k for k in extra if k in run_env and (is_credential_name(k) or matches_any(k, strip))]:
        del run_env[name]
    return run_env
