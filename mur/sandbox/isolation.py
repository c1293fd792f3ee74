"""A session's isolation, set up once at ``ShellSandbox.start``: the aggregate bound (the session's
own cgroup, or the cgroup mur runs in when that bound is tight enough), the namespaces the tools
join (and the network plan they carry), and, as root, the leased session uid.
"""

from __future__ import annotations

from typing import Any, Callable

from mur.errors import MurError
from mur.sandbox import cgroups, enclosing, namespaces, policy as pol, tree, uids
from mur.sandbox.enclosing import E012_HINT, EnclosingCgroup
from mur.sandbox.probe import HostProbe


# Landlock does not mediate these; only the read-only mount view (namespaces.py) stops them
WRITABLE_VIEW = ("a tool can change the mode, owner, times and extended attributes (chmod, chown, utime, setxattr) "
                 "of files its uid owns outside the workdir")


def session_cgroup(caps: Any, session_id: str, workdir: str, *, log: Callable[[str], None],
                   waited_for: Callable[[], set[int]]) -> cgroups.SessionCgroup | EnclosingCgroup:
    """The session's cgroup(s) with the manifest's aggregate limits, else the enclosing bound (E-RUN-012
    when neither holds). ``waited_for``: mur's children tree.reap must leave to their own waiter."""
    resources = caps.resources
    # pids.max counts the session's spawner too (spawn.py): one more, so tools get exactly theirs
    limits = cgroups.CgroupLimits(resources.cgroup_memory_bytes, resources.cgroup_pids_max + 1,
                                  resources.cgroup_cpu_percent, resources.cgroup_io_bytes_per_sec)
    try:
        made: cgroups.SessionCgroup | EnclosingCgroup = cgroups.create_session_cgroup(session_id, limits,
                                                                                       workdir=workdir)
    except cgroups.CgroupUnavailable as exc:
        made = _enclosing_cgroup(caps, exc, limits, log, waited_for)
    for note in made.notes:
        log(f"cgroup: {note}")
    return made


def _enclosing_cgroup(caps: Any, exc: cgroups.CgroupUnavailable, limits: cgroups.CgroupLimits,
                      log: Callable[[str], None], waited_for: Callable[[], set[int]]) -> EnclosingCgroup:
    """No cgroup of the session's own: the cgroup mur runs in is the aggregate bound when it has a
    memory limit (and a pids.max, if any) at or below the manifest's that mur cannot change;
    E-RUN-012 otherwise."""
    bound = enclosing.find_enclosing()
    # the manifest's own pids bound (limits.pids_max counts the spawner): mur shares that cgroup anyway
    why = enclosing.unmet(bound, limits.memory_bytes, caps.resources.cgroup_pids_max)
    if why is not None:
        raise MurError(
            "E-RUN-012",
            f"no cgroup could be created to bound the shell subprocess tree ({exc}), {why}; a capsule with "
            "capabilities.shell.allow does not run without an aggregate memory/pids bound", E012_HINT,
        ) from exc
    assert bound is not None
    tree.become_subreaper()  # a tool's orphans come back to mur, where kill_tools finds them
    log(f"cgroup: no cgroup of the session's own ({exc}); the aggregate bound is the cgroup mur runs in, "
        f"which no process in it can leave or raise ({bound.describe()}), shared with the runtime")
    return EnclosingCgroup(bound, find=lambda: {p for p, st in tree.tool_processes().items() if st != "Z"},
                           kill=lambda timeout: tree.kill_tools(timeout, exclude=waited_for()))


def lease_uid(session_id: str) -> uids.UidLease:
    try:
        return uids.lease(session_id)
    except uids.UidUnavailable as exc:
        raise MurError("E-RUN-015", f"no sandbox uid could be leased for this session: {exc}",
                       "mur keeps its uid leases in /run/mur/uids; it must be a root-owned directory") from exc


def isolate(caps: Any, network_allow: list[Any], probe: HostProbe, *, is_root: bool, workdir: str,
            resolve: Callable[[str], list[str]], log: Callable[[str], None],
            ) -> tuple[pol.NetworkPlan, tuple[str, ...], namespaces.SessionNamespaces | None]:
    """Create the session's namespaces (and the proxy listener in them); returns the network plan,
    the namespaces the tools will join and their holder. Refuses (E-CAP-005) rather than fall back to
    port rules when the probe promised a network namespace and it cannot be made now."""
    linux = probe.os == "linux"
    names = (pol.plan_namespaces(is_root=is_root, private_net=probe.netns, userns=probe.userns)
             if linux else ())
    resolves = lambda host: bool(resolve(host)) if linux else False  # noqa: E731
    network = pol.plan_network(network_allow, resolves, private_net=bool(names),
                               landlock_abi=probe.landlock_abi if linux else 0)
    if not names:
        if linux:
            log(f"no session namespaces on this host: {WRITABLE_VIEW}")
        return network, (), None
    port = pol.PROXY_PORT if network.proxy else None
    noexec = not caps.filesystem.workdir_exec
    try:
        try:
            made = namespaces.create(names, workdir=workdir, proxy_port=port, noexec=noexec)
        except OSError as exc:
            if "mnt" not in names:
                raise
            # e.g. a workdir on a filesystem that refuses a bind mount here: keep the rest
            names = tuple(n for n in names if n != "mnt")
            made = namespaces.create(names, workdir=workdir, proxy_port=port)
            log(f"the tools' mount view could not be made ({exc}): "
                + ("the ELF loader could still map a binary copied into the workdir, and " if noexec else "")
                + WRITABLE_VIEW)
    except OSError as exc:
        if network.proxy:
            raise MurError("E-CAP-005", f"cannot create the network namespace that carries network.allow for "
                           f"shell tools: {exc}", "run mur as root, or allow unprivileged user namespaces "
                           "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces)") from exc
        log(f"the session namespaces could not be created ({exc}): tools run without them, and {WRITABLE_VIEW}")
        return pol.plan_network(network_allow, resolves, private_net=False, landlock_abi=probe.landlock_abi), (), None
    if "mnt" in names and made.view != "read-only":
        log(f"the tools' mount view stays writable outside the workdir: {made.view}; {WRITABLE_VIEW}")
    return network, names, made
