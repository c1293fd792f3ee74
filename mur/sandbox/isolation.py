"""The appliers of a session's isolation, run by ``ShellSandbox.start`` after the policy is decided
(mur.sandbox.decide): the aggregate bound (the session's own cgroup, or the cgroup mur runs in when
that bound is tight enough), the namespace holder (with the composed root and the session disk in
it), and, as root, the leased session uid.

An applier that cannot make its part raises ``Replan`` with the fact that changed; the sandbox then
decides the whole policy again with it (a fallback is a new decision, never a patch).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.sandbox import cgroups, disk as dsk, enclosing, namespaces, policy as pol, tree, uids
from mur.sandbox.decide import SessionFacts
from mur.sandbox.enclosing import E012_HINT, EnclosingCgroup
from mur.sandbox.probe import HostProbe

# Landlock does not mediate these; only the read-only mount view (namespaces.py) stops them
WRITABLE_VIEW = ("a tool can change the mode, owner, times and extended attributes (chmod, chown, utime, setxattr) "
                 "of files its uid owns outside the workdir")


class Replan(Exception):
    """An applier could not make its part; ``update`` turns the facts into the ones to decide from next."""

    def __init__(self, message: str, update: Callable[[SessionFacts], SessionFacts]) -> None:
        super().__init__(message)
        self.message = message
        self.update = update


def expected_aggregate(probe: HostProbe, caps: Any) -> str:
    """What will bound the tool tree (policy.AGGREGATE_BOUNDS), from the probe and, without a
    delegated cgroup, the enclosing one's limits (a measurement)."""
    if probe.os != "linux" or probe.cgroup_delegated:
        return "session-cgroup"
    bound = enclosing.find_enclosing()
    if bound is None:
        return "session-cgroup"  # nothing to fall back on: creating the session cgroup decides (E-RUN-012)
    return "enclosing-cgroup" if bound.pids_max is not None else "enclosing-cgroup+nproc"


def _aggregate_of(made: cgroups.SessionCgroup | EnclosingCgroup) -> str:
    if not isinstance(made, EnclosingCgroup):
        return "session-cgroup"
    return "enclosing-cgroup" if made.bound.pids_max is not None else "enclosing-cgroup+nproc"


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


def apply_cgroup(policy: pol.ShellPolicy, caps: Any, session_id: str, workdir: str, *, log: Callable[[str], None],
                 waited_for: Callable[[], set[int]]) -> cgroups.SessionCgroup | EnclosingCgroup:
    """The bound the policy names; Replan when another one is what this host gave."""
    made = session_cgroup(caps, session_id, workdir, log=log, waited_for=waited_for)
    got = _aggregate_of(made)
    if got != policy.aggregate:
        try:
            made.remove()
        except OSError:
            pass
        raise Replan(f"the aggregate bound is {got}, not {policy.aggregate}",
                     lambda facts: replace(facts, aggregate=got))
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


def disk_image(policy: pol.ShellPolicy, directory: Path) -> tuple[Path, int] | None:
    """The ext4 image the holder mounts (ext4-loop in a composed root), else None; Replan on failure."""
    plan = policy.disk
    if plan is None or plan.mechanism != "ext4-loop" or policy.view is None:
        return None
    try:
        return dsk.make_image(plan, directory)
    except OSError as exc:
        message = f"the session disk's image could not be made ({exc})"
        raise Replan(message, lambda facts: facts.failing("disk-loop", message)) from exc


def holder(policy: pol.ShellPolicy, workdir: str, *, image_fd: int | None, host_tmp: str | None,
           log: Callable[[str], None]) -> namespaces.SessionNamespaces | None:
    """The session's namespaces as the policy names them (the composed root and the disk in them);
    E-CAP-005 when the network namespace that carries network.allow cannot be made, Replan for the rest."""
    names = policy.namespaces
    if not names:
        if policy.tier != "environment-only" and policy.landlock is not None:
            log(f"no session namespaces on this host: {WRITABLE_VIEW}")
        return None
    disk = policy.disk if policy.disk is not None and policy.disk.kernel and policy.view is not None else None
    try:
        made = namespaces.create(names, workdir=workdir, proxy_port=pol.PROXY_PORT if policy.network.proxy else None,
                                 noexec=policy.noexec_workdir is not None, view=policy.view, disk=disk,
                                 image_fd=image_fd, host_tmp=host_tmp)
    except namespaces.HolderFailed as exc:
        message = str(exc)
        part = exc.part
        if part == "disk":
            part = "disk-loop" if disk is not None and disk.mechanism == "ext4-loop" else "disk"
        elif part not in ("view", "mnt"):
            if "mnt" in names:
                part = "mnt"  # e.g. a workdir on a filesystem that refuses a bind mount here: keep the rest
            elif policy.network.proxy:
                raise MurError("E-CAP-005", f"cannot create the network namespace that carries network.allow for "
                               f"shell tools: {exc}", "run mur as root, or allow unprivileged user namespaces "
                               "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces)") from exc
            else:
                part = "namespaces"
        raise Replan(message, lambda facts: facts.failing(part, message)) from exc
    if "mnt" in names and policy.view is None and made.view != "read-only":
        log(f"the tools' mount view stays writable outside the workdir: {made.view}; {WRITABLE_VIEW}")
    return made
