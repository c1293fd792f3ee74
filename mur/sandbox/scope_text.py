"""The human text of `mur run --explain-scope` from its report (mur.sandbox.scope.scope_report).

Plain data in, text out, and nothing heavy imported: a report remembered by
mur.session.explain_memo is printed from here without loading the manifest models.
"""

from __future__ import annotations

from typing import Any

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


def interpreter_lines(report: dict[str, Any]) -> list[str]:
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
    _push_list(out, "interpreter runtime", interpreter_lines(report))
    if not c["floor_met"]:
        out.append("")
        out.append("This is a report only — `mur run` without --explain-scope would refuse to launch here.")
    return "\n".join(out) + "\n"
