"""What `mur run --explain-scope` reports and what `session_start.effective_grants` records: the
manifest's grants beside what this host's kernel will enforce (containment class from
mur.manifest.containment, network and process isolation from the sandbox policy). The report's
human text is mur.sandbox.scope_text, which imports nothing heavy (a remembered report is printed
without the manifest models: mur.session.explain_memo)."""

from __future__ import annotations

from typing import Any

from mur.manifest.capsule import Capsule
from mur.manifest.containment import (
    Floor,
    ProbeLike,
    achieved_class,
    subprocess_shortfall,
    shortfall_reason,
)
from mur.manifest.network import parse_allow_list
from mur.sandbox.policy import explain_isolation
from mur.sandbox.scope_text import interpreter_lines, render_scope_report

__all__ = ["effective_grants", "render_scope_report", "scope_report"]


def scope_report(capsule: Capsule, floor: Floor, probe: ProbeLike) -> dict[str, Any]:
    """The `--explain-scope --json` object: containment + the capsule-wide grant set."""
    caps = capsule.capabilities
    workdir_exec = caps.filesystem.workdir_exec
    short = subprocess_shortfall(caps, probe)
    achieved = achieved_class(probe, workdir_exec, short)
    reason = shortfall_reason(floor.declared, achieved, workdir_exec, short)
    network, processes = explain_isolation(parse_allow_list(list(caps.network.allow)), probe)
    shell = caps.shell
    return {
        "containment": {
            "declared": floor.declared,
            "declared_source": floor.source,
            "achieved": achieved,
            "floor_met": reason is None,
            "reason": reason,
            "mechanism": probe.mechanism,
            "network": network,
            "processes": processes,
        },
        "grants": {
            "filesystem_scope": caps.filesystem.scope,
            "network_allow": list(caps.network.allow),
            "unix_sockets": caps.network.unix_sockets,
            "shell_allow": caps.shell_allow,
            "spawn_allow": caps.spawn_allow,
            "env_allow": list(caps.env.allow),
            "interpreter_runtime": [
                {"binary": g.binary, "dirs": [{"path": d.path, "list_dir": d.list_dir} for d in g.dirs]}
                for g in (shell.interpreter_runtime if shell else [])
            ],
        },
    }


def effective_grants(capsule: Capsule, floor: Floor, probe: ProbeLike) -> dict[str, Any]:
    """`session_start.effective_grants` in trace.jsonl (upstream section 3.3)."""
    report = scope_report(capsule, floor, probe)
    c, g = report["containment"], report["grants"]
    out: dict[str, Any] = {
        "declared_containment": c["declared"],
        "achieved_containment": c["achieved"],
        "floor_met": c["floor_met"],
    }
    if c["reason"] is not None:
        out["shortfall_reason"] = c["reason"]
    out.update(
        {
            "enforcement_tier": probe.mechanism,
            "filesystem_scope": g["filesystem_scope"],
            "workdir_exec": capsule.capabilities.filesystem.workdir_exec,
            "network_allow": g["network_allow"],
            "unix_sockets": g["unix_sockets"],
            "shell_allow": g["shell_allow"],
            "spawn_allow": g["spawn_allow"],
            "env_allow": g["env_allow"],
            "interpreter_runtime_grants": interpreter_lines(report),
            "staged_runtime_grants": [],
        }
    )
    return out
