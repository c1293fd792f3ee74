"""The human text of `mur run --explain-scope` from its flat report (mur.sandbox.scope.scope_report,
the same object `session_start.effective_grants` records).

Plain data in, text out, and nothing heavy imported (the explain path's imports stay small).
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
VIEW_TEXT = {
    "composed-root": "a root built for the session: the workdir, a private /tmp, /dev, the session's /proc "
                     "and the granted paths; everything else does not exist",
    "read-only-host": "the host's tree, read-only outside the workdir; metadata outside the grants stays readable",
    "host": "the host's tree; metadata outside the grants stays readable",
}
DISK_TEXT = {
    "ext4-loop": "a per-session ext4 filesystem of that size (kernel-counted, on disk)",
    "tmpfs": "a per-session tmpfs of that size (kernel-counted, in RAM)",
    "watcher": "mur's watcher sums st_blocks of every inode at a fixed interval (not kernel-counted)",
}


def _push_list(out: list[str], label: str, values: list[str]) -> None:
    if not values:
        out.append(f"  {label}: <none>")
        return
    out.append(f"  {label}:")
    out.extend(f"    - {v}" for v in values)


def render_scope_report(report: dict[str, Any]) -> str:
    """The human `--explain-scope` report, laid out as the spec shows it (the flat report of
    mur.sandbox.scope: the same object `session_start.effective_grants` records)."""
    r = report
    out = [
        "Containment",
        f"  declared:  {r['declared_containment']}",
        f"  source:    {SOURCE_TEXT.get(r['declared_source'], r['declared_source'])}",
        f"  achieved:  {r['achieved_containment']}",
        f"  floor met: {'yes' if r['floor_met'] else 'no'}",
    ]
    if r.get("shortfall_reason"):
        out.append(f"  reason:    {r['shortfall_reason']}")
    out.append(f"  mechanism: {r['enforcement_tier']}")
    if r.get("sealed_blocker") and r["achieved_containment"] != "advisory":
        out.append(f"  sealed:    not here: {r['sealed_blocker']}")
    out.append(f"  network:   {r['network_isolation']} "
               f"({NETWORK_TEXT.get(r['network_isolation'], r['network_isolation'])})")
    out.append(f"  processes: {r['process_isolation']} "
               f"({PROCESS_TEXT.get(r['process_isolation'], r['process_isolation'])})")
    view = r["host_view"]
    out.append(f"  view:      {view} ({VIEW_TEXT.get(view, view)})")
    disk = r["disk_ceiling"]
    out.append(f"  disk:      {r['disk_ceiling_bytes']} bytes, {disk} ({DISK_TEXT.get(disk, disk)}"
               + (f"; {r['disk_ceiling_inodes']} inodes" if r.get("disk_ceiling_inodes") and disk != "watcher" else "")
               + ")")
    if r.get("disk_ceiling_reason"):
        out.append(f"             why not kernel-counted: {r['disk_ceiling_reason']}")
    out.append("")
    out.append("Effective grants")
    out.append(f"  filesystem scope: {r['filesystem_scope'] or '<none>'}")
    _push_list(out, "network allow", r["network_allow"])
    out.append(f"  unix sockets:     {'true' if r['unix_sockets'] else 'false'}")
    _push_list(out, "shell allow", r["shell_allow"])
    _push_list(out, "spawn allow", r["spawn_allow"])
    _push_list(out, "env allow", r["env_allow"])
    _push_list(out, "interpreter runtime", r["interpreter_runtime_grants"])
    if not r["floor_met"]:
        out.append("")
        out.append("This is a report only — `mur run` without --explain-scope would refuse to launch here.")
    return "\n".join(out) + "\n"
