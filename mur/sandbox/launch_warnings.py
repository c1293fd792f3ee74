"""The launch warnings a shell sandbox states (W-SEC-001/002/003/005/010), from its policy.

W-SEC-005 names every mechanism in force: the filesystem scope, how the network grant is carried
(``policy.NetworkPlan``), the socket families, and how other processes are out of reach.
"""

from __future__ import annotations

from typing import Any

from mur.sandbox.policy import ShellPolicy


def network_text(policy: ShellPolicy) -> str:
    """One clause: how shell tools reach the network on this host."""
    net = policy.network
    ll = policy.landlock
    if net.mode == "none":
        return "no network: no network.allow host resolved, so inet sockets are refused"
    hosts = ", ".join(getattr(e, "raw") for e in net.allow)
    if net.mode == "proxy":
        return (f"network only through mur's egress proxy (HTTP(S)_PROXY, in a private network namespace) to "
                f"exactly [{hosts}]; every other destination, address or protocol is unreachable")
    fallback = "no private network namespace on this host, so"
    if net.mode == "ports":
        return (f"{fallback} TCP connect is limited by port only: port(s) {', '.join(map(str, net.tcp.ports))} "
                "on ANY address (Landlock rules are port-only), no TCP bind")
    if net.tcp.any_port:
        return (f"{fallback} TCP connect is not restricted: network.allow entry '{net.tcp.any_port[0]}' allows every "
                "port, and Landlock rules are port-only")
    abi = ll.abi if ll is not None else 0
    return f"{fallback} TCP connect is not filtered (Landlock ABI {abi} has no TCP rules)"


def process_text(policy: ShellPolicy) -> str:
    if policy.processes == "session-uid":
        assert policy.run_as is not None
        return f"tools run as uid {policy.run_as[0]}, leased for this session only"
    if policy.processes == "pid-namespace":
        return "tools run in the session's own pid namespace (and may not name another pid)"
    if policy.processes == "landlock-scope+seccomp":
        return "tools share mur's uid: signals are scoped by Landlock, other pid-targeting calls refused by seccomp"
    return ("tools share mur's uid and this host scopes no signals (Landlock ABI < 6, no user namespaces): a tool "
            "can signal mur's own processes")


def aggregate_text(policy: ShellPolicy) -> str:
    """'' for a session cgroup of its own, else one clause naming the bound that stands in for it."""
    if policy.aggregate == "session-cgroup":
        return ""
    tasks = "its pids.max" if policy.aggregate == "enclosing-cgroup" else \
        f"the tools' RLIMIT_NPROC ({dict(policy.rlimits).get('NPROC')}; the cgroup sets no pids.max)"
    return (f"; no cgroup of the session's own: the aggregate bound is the cgroup mur runs in, shared with the "
            f"runtime (its memory limit; tasks by {tasks})")


def view_text(policy: ShellPolicy) -> str:
    """One clause: what the tools see of the host, and what counts their disk."""
    if policy.view is not None:
        seen = ("they run in a root built for the session (mount namespace + pivot_root): the workdir"
                + (", a private /tmp" if policy.view.tmp else "") + ", /dev, the session's /proc and the granted "
                "paths; nothing else of the host exists for them")
    else:
        seen = f"they see the host's tree ({policy.view_reason})" if policy.view_reason else "they see the host's tree"
    disk = policy.disk
    if disk is None:
        return seen
    if disk.kernel:
        return (f"{seen}; the workdir is a {disk.mechanism} filesystem of {disk.limit} bytes and {disk.inodes} "
                "inodes: a write past it fails with ENOSPC")
    return f"{seen}; the workdir ceiling is mur's watcher, not the kernel ({disk.reason})"


def launch_warnings(caps: Any, probe: Any, policy: ShellPolicy) -> list[tuple[str, str]]:
    """[(code, message)] for this session's launch, in the order the runtime prints them."""
    names = ", ".join(caps.shell_allow)
    out: list[tuple[str, str]] = []
    if probe.os != "linux":
        extra = " and, on macOS, no per-process memory bound (RLIMIT_DATA is not enforced)" \
            if probe.os == "darwin" else ""
        out.append(("W-SEC-010", (
            f"no cgroup aggregate bound on this host ({probe.os}): native subprocesses get per-process rlimits "
            f"only, no bound on the whole tree's memory, task count or CPU{extra}"
        )))
    if not caps.shell_allow:
        return out
    unix_text = (
        "AF_UNIX sockets are ALLOWED (network.unix_sockets: true): every unix socket the tool can reach, "
        "/var/run/docker.sock included"
        if caps.network.unix_sockets else "AF_UNIX sockets are refused (network.unix_sockets: false)"
    )
    tier: list[tuple[str, str]] = []
    if probe.tier == "full":
        tier.append(("W-SEC-005", (
            f"kernel enforcement in force ({policy.mechanism}, Landlock ABI {probe.landlock_abi}): shell tools "
            f"[{names}] may write only inside the workdir and execute only their own binaries and libraries; "
            f"{view_text(policy)}; {network_text(policy)}; {unix_text}; {process_text(policy)}{aggregate_text(policy)}"
        )))
    elif probe.tier == "seccomp-only":
        tier.append(("W-SEC-002", (
            f"Linux without Landlock (seccomp-only tier): the filesystem scope and the exec allowlist are NOT "
            f"enforced for shell tools [{names}]; seccomp, rlimits and cgroups still apply; "
            f"{network_text(policy)}; {unix_text}"
        )))
    else:
        tier.append(("W-SEC-001", (
            f"capabilities.shell.allow is non-empty but this host has no kernel enforcement (environment-only "
            f"tier): shell tools [{names}] run with the runtime's own filesystem and network reach"
        )))
        if "bash" in caps.shell_allow and caps.network.allow:
            tier.append(("W-SEC-003", (
                "bash in capabilities.shell.allow together with capabilities.network.allow on a host with no "
                "kernel enforcement: network.allow does not constrain what bash can reach"
            )))
    return tier + out
