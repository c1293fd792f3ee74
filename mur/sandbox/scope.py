"""What `mur run --explain-scope` reports and what `session_start.effective_grants` records: the
manifest's grants beside what this host's kernel will enforce (containment class from
mur.manifest.containment, network and process isolation from the sandbox policy)."""

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

NETWORK_TEXT = {
    "netns+egress-proxy": "shell tools reach exactly the allowed hosts, through mur's egress proxy",
    "landlock-tcp-ports": "no network namespace: any address on an allowed TCP port",
    "unfiltered-tcp": "no network namespace and no usable TCP rule: TCP connect is not restricted",
    "no-inet-sockets": "no network.allow: shell tools get no inet socket",
    "unenforced": "no kernel enforcement on this host",
}
PROCESS_TEXT = {
    "session-uid": "tools run as a uid leased for the session",
    "pid-namespace": "tools run in the session's own pid namespace; calls naming another pid refused by seccomp",
    "landlock-scope+seccomp": "tools share mur's uid; signals scoped by Landlock, pid-targeting calls by seccomp",
    "seccomp-only": "tools share mur's uid; only kill(-1) and pid-targeting calls are refused",
    "unenforced": "no kernel enforcement on this host",
}
SOURCE_TEXT = {
    "manifest": "capabilities.containment in murmur.yaml",
    "config": "containment in .murmur/config.yaml",
    "cli": "--containment",
    "default": "nothing declared",
}


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
            "interpreter_runtime_grants": _interpreter_lines(report),
            "staged_runtime_grants": [],
        }
    )
    return out


def _interpreter_lines(report: dict[str, Any]) -> list[str]:
    return [
        f"{g['binary']}: {d['path']}{' (list_dir)' if d['list_dir'] else ''}"
        for g in report["grants"]["interpreter_runtime"]
        for d in g["dirs"]
    ]


def _push_list(out: list[str], label: str, values: list[str]) -> None:
    if not values:
        out.append(f"  {label}: <none>")
        return
    out.append(f"  {label}:")
    out.extend(f"    - {v}" for v in values)


def render_scope_report(report: dict[str, Any]) -> str:
    """The human `--explain-scope` report, laid out as the spec shows it."""
    c, g = report["containment"], report["grants"]
    out = [
        "Containment",
        f"  declared:  {c['declared']}",
        f"  source:    {SOURCE_TEXT.get(c['declared_source'], c['declared_source'])}",
        f"  achieved:  {c['achieved']}",
        f"  floor met: {'yes' if c['floor_met'] else 'no'}",
    ]
    if c["reason"]:
        out.append(f"  reason:    {c['reason']}")
    out.append(f"  mechanism: {c['mechanism']}")
    if "network" in c:
        out.append(f"  network:   {c['network']} ({NETWORK_TEXT.get(c['network'], c['network'])})")
        out.append(f"  processes: {c['processes']} ({PROCESS_TEXT.get(c['processes'], c['processes'])})")
    out.append("")
    out.append("Effective grants")
    out.append(f"  filesystem scope: {g['filesystem_scope'] or '<none>'}")
    _push_list(out, "network allow", g["network_allow"])
    out.append(f"  unix sockets:     {'true' if g['unix_sockets'] else 'false'}")
    _push_list(out, "shell allow", g["shell_allow"])
    _push_list(out, "spawn allow", g["spawn_allow"])
    _push_list(out, "env allow", g["env_allow"])
    _push_list(out, "interpreter runtime", _interpreter_lines(report))
    if not c["floor_met"]:
        out.append("")
        out.append("This is a report only — `mur run` without --explain-scope would refuse to launch here.")
    return "\n".join(out) + "\n"

