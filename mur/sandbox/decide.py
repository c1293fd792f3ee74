"""Decide, then apply: a session's whole sandbox as one value.

``decide(caps, allow, facts)`` turns the manifest's capabilities and what was measured on this
host (``SessionFacts``: the probe, the binaries' closures, which hosts resolve, the session uid,
how paths resolve, the host's memory, and which parts an applier already failed to make) into one
frozen ``ShellPolicy``: the namespaces, the network mechanism, the tools' view (a composed root, or
the host's tree), the disk ceiling, the Landlock rules, the seccomp tables, the rlimits, the cgroup
limits and the uid. It is pure: no syscall, no file read (the facts carry every measurement), so
the whole decision is unit-tested as data, and ``mur run --explain-scope`` prints the value this
same function returns for the facts it can gather without side effects (``explain_facts``).

The appliers (ShellSandbox.start: cgroups, the namespace holder with the view and the disk, the
spawner with Landlock and seccomp, the egress proxy, the ceiling's guard) read only that value.
When one cannot make its part at launch, the failure becomes a fact (``SessionFacts.failed``) and
the policy is decided again, whole: a fallback is a new decision, never a patch on an applied one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from mur.sandbox import policy as pol
from mur.sandbox.diskplan import DiskFacts, DiskPlan, plan_disk
from mur.sandbox.viewplan import TMP, Chain, plan_view

VIEW_ONLY_REASONS = ("workdir", "private /tmp", "the session's /proc")  # Landlock grants the view makes itself


def _always(_value: str) -> bool:
    return True


def _as_given(path: str) -> Chain:
    return Chain((), path, True)


@dataclass(frozen=True)
class SessionFacts:
    """Everything measured on this host that the policy depends on; decide() reads nothing else."""

    probe: Any  # mur.sandbox.probe.HostProbe
    workdir: str
    root: bool  # mur runs as root (tools get a leased uid, namespaces need no user namespace)
    readonly: tuple[str, ...] = ()  # the session's logs, outside the workdir
    closures: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    named: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # the closures as the loader names them
    resolves: Callable[[str], bool] = _always  # network.allow hosts that resolved at launch
    run_as: tuple[int, int] | None = None  # the leased session uid (root only)
    uid_tasks: int = 0  # the tasks mur's own uid runs (RLIMIT_NPROC's baseline when tools share it)
    hard_limits: Mapping[str, int] = field(default_factory=dict)
    existing: Callable[[str], bool] = _always
    chains: Callable[[str], Chain | None] = _as_given  # how a host path resolves (viewplan.measure_chain)
    path_dirs: tuple[str, ...] = ()  # the PATH entries binaries are found on
    staged: bool = False  # the host workdir holds the runtime's tools/ (a real directory)
    memory_total: int = 0  # the host's RAM
    aggregate: str = "session-cgroup"  # policy.AGGREGATE_BOUNDS
    failed: frozenset[str] = frozenset()  # parts an applier could not make: namespaces, mnt, view, disk, disk-loop
    failures: tuple[str, ...] = ()  # what they said

    def failing(self, part: str, message: str) -> "SessionFacts":
        """These facts, with ``part`` failed at launch (for the next decision)."""
        return replace(self, failed=self.failed | {part}, failures=self.failures + (message,))


def plan_names(facts: SessionFacts) -> tuple[str, ...]:
    probe = facts.probe
    if getattr(probe, "os", "linux") != "linux" or "namespaces" in facts.failed:
        return ()
    names = pol.plan_namespaces(is_root=facts.root, private_net=bool(getattr(probe, "netns", False)),
                                userns=bool(getattr(probe, "userns", False)))
    return tuple(n for n in names if n != "mnt") if "mnt" in facts.failed else names


def _view_reason(caps: Any, facts: SessionFacts, names: tuple[str, ...]) -> str | None:
    from mur.manifest.containment import view_shortfall

    probe = facts.probe
    short = view_shortfall(caps)
    if short is not None:
        return short
    if getattr(probe, "os", "linux") != "linux":
        return f"the tools see the host's tree: {getattr(probe, 'os', '?')} has no mount namespaces"
    if "view" in facts.failed:
        return "the composed root could not be built at launch: " + "; ".join(facts.failures)
    if "mnt" not in names:
        why = "; ".join(facts.failures) if facts.failed else (getattr(probe, "sealed_reason", None)
                                                              or "no mount namespace for the session here")
        return f"no mount namespace for the session: {why}"
    if not getattr(probe, "sealed", False):
        return getattr(probe, "sealed_reason", None) or "the composed root was not verified on this host"
    return None


def disk_facts(facts: SessionFacts, mount_ns: bool, memory_bound: int, no_mount_ns: str | None = None) -> DiskFacts:
    probe = facts.probe
    why = getattr(probe, "disk_reason", None)
    if "disk" in facts.failed or "disk-loop" in facts.failed:
        why = "; ".join(facts.failures)
    return DiskFacts(mount_ns=mount_ns, loop=bool(getattr(probe, "disk_loop", False)) and "disk-loop" not in facts.failed
                     and "disk" not in facts.failed,
                     tmpfs=bool(getattr(probe, "disk_tmpfs", False)) and "disk" not in facts.failed,
                     memory_total=facts.memory_total, memory_bound=memory_bound, why_not=why, no_mount_ns=no_mount_ns)


def decide(caps: Any, network_allow: Iterable[object], facts: SessionFacts) -> pol.ShellPolicy:
    """The session's whole sandbox (see the module docstring)."""
    probe = facts.probe
    linux = getattr(probe, "os", "linux") == "linux"
    names = plan_names(facts)
    abi = getattr(probe, "landlock_abi", 0) if linux else 0
    network = pol.plan_network(network_allow, facts.resolves if linux else (lambda _h: False),
                               private_net="net" in names, landlock_abi=abi)
    view_reason = _view_reason(caps, facts, names)
    composed = linux and view_reason is None
    resources = caps.resources
    workdir_exec = bool(caps.filesystem.workdir_exec)
    disk = plan_disk(resources.workdir_max_bytes,
                     disk_facts(facts, composed, resources.cgroup_memory_bytes, view_reason),
                     root=facts.root, workdir_exec=workdir_exec)
    tmp = TMP if composed and facts.workdir != TMP and not TMP.startswith(facts.workdir.rstrip("/") + "/") else None
    policy = pol.build_policy(
        caps, facts.workdir, probe, closures=dict(facts.closures), network=network, run_as=facts.run_as,
        # a fresh session uid, or a user namespace of our own, starts from no tasks at all; the
        # session's spawner is one more task of the tools' uid (zygote.py)
        namespaces=names, nproc_baseline=1 + (0 if facts.run_as or "user" in names else facts.uid_tasks),
        hard_limits=dict(facts.hard_limits),
        existing=facts.existing, readonly=facts.readonly, aggregate=facts.aggregate, tmp=tmp, composed=composed,
        disk=disk, view_reason=view_reason,
    )
    if not composed:
        return policy
    grants = policy.landlock.grants if policy.landlock is not None else _visible(caps, facts, network, tmp)
    shown = [(path, f"binary {name}") for name, paths in facts.named.items() for path in paths]
    shown += [(g.path, g.reason) for g in grants if g.reason not in VIEW_ONLY_REASONS]
    view = plan_view(facts.workdir, shown, chains=facts.chains, path_dirs=facts.path_dirs, tmp=tmp is not None,
                     workdir_exec=workdir_exec, staged=facts.staged)
    return replace(policy, view=view, host_view="composed-root")


def _visible(caps: Any, facts: SessionFacts, network: pol.NetworkPlan, tmp: str | None) -> tuple[pol.PathGrant, ...]:
    """What the view shows where Landlock cannot say it (no Landlock): the grants it would make."""
    shell = caps.shell
    return pol.landlock_policy(
        1, facts.workdir, workdir_exec=bool(caps.filesystem.workdir_exec), closures=dict(facts.closures),
        interpreter_runtime=shell.interpreter_runtime if shell else (), network=network, existing=facts.existing,
        readonly=facts.readonly, tmp=tmp, composed=True,
    ).grants


def guest_disk(caps: Any, facts: SessionFacts) -> DiskPlan:
    """The disk ceiling of a session without subprocesses (only guests write its workdir): the same
    mechanisms, in a mount namespace of the session's own where the probe built one."""
    mount_ns = getattr(facts.probe, "os", "linux") == "linux" and bool(getattr(facts.probe, "sealed", False)) \
        and "view" not in facts.failed
    why = None if mount_ns else (getattr(facts.probe, "sealed_reason", None) or "no mount namespace here")
    return plan_disk(caps.resources.workdir_max_bytes,
                     disk_facts(facts, mount_ns, caps.resources.cgroup_memory_bytes, why),
                     root=facts.root, workdir_exec=bool(caps.filesystem.workdir_exec))


def memory_total(meminfo: str = "/proc/meminfo") -> int:
    """The host's RAM in bytes (0 when unknown): a measurement for SessionFacts."""
    try:
        with open(meminfo) as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def explain_facts(probe: Any, workdir: str = "<workdir>") -> SessionFacts:
    """The facts `--explain-scope` decides from: the probe and the host's memory, nothing resolved
    (no DNS, no ELF closure, no uid leased): fast and read-only, as the spec asks."""
    root = bool(getattr(probe, "root", False))
    return SessionFacts(probe, workdir, root, run_as=(1, 1) if root else None, memory_total=memory_total(),
                        path_dirs=())


def host_path_dirs(path_env: str) -> tuple[str, ...]:
    """The absolute PATH entries (a measurement input: which directories a view makes resolvable)."""
    return tuple(dict.fromkeys(p for p in path_env.split(os.pathsep) if os.path.isabs(p)))
