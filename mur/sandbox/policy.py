"""The shell sandbox policy as data: capabilities + workdir + host probe -> ``ShellPolicy``.

Pure: no syscalls, no filesystem access. Everything measured on the host (the probe, the binaries'
resolved closures, the resolved network ports, the uid's process count, the inherited hard limits)
comes in as arguments, so the whole policy can be asserted in unit tests and printed by
``--explain-scope``. The thin appliers (landlock.py, seccomp.py, rlimits.py, cgroups.py, spawn.py)
turn it into kernel state.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field
from typing import Callable, Iterable

from mur.sandbox import landlock as ll
from mur.sandbox.cgroups import CgroupLimits

NOBODY = 65534
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})

# Syscalls refused with EPERM: the kernel-attack and escape surface a tool never needs (the Docker
# default profile's refusals, plus io_uring, whose ring operations bypass seccomp entirely).
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "unshare", "setns",
    "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie", "fanotify_init",
    "keyctl", "add_key", "request_key",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "vhangup",
    "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "uselib",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "create_module", "get_kernel_syms", "query_module", "nfsservctl", "_sysctl",
)
# clone3 passes its flags in a struct seccomp cannot read: answer ENOSYS so libc falls back to
# clone(), whose flags we can filter (what Docker and systemd do).
ENOSYS_SYSCALLS = ("clone3",)
CLONE_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
TIOCSTI, TIOCLINUX = 0x5412, 0x541C  # terminal input injection
# A memfd lives on an internal mount Landlock does not mediate, so write-ELF-to-memfd + fexecve
# would run a binary that is not allow-listed. memfd_create is refused unless the caller seals it
# non-executable (MFD_NOEXEC_SEAL, Linux 6.3+).
MFD_NOEXEC_SEAL = 0x0008


@dataclass(frozen=True)
class SeccompTable:
    """The syscall table (compiled by ``mur.sandbox.seccomp``); default action: allow.

    errno_syscalls:   (syscall, errno) refused outright
    errno_arg_equal:  (syscall, arg index, value, errno) refused when that 32-bit argument equals value
    errno_arg_masked: (syscall, arg index, mask, value, errno) refused when (argument & mask) == value
    """

    errno_syscalls: tuple[tuple[str, int], ...]
    errno_arg_equal: tuple[tuple[str, int, int, int], ...]
    errno_arg_masked: tuple[tuple[str, int, int, int, int], ...]


def seccomp_table(unix_sockets: bool, workdir_exec: bool = False) -> SeccompTable:
    """The refusals: dangerous syscalls, namespace creation, AF_NETLINK/AF_PACKET, AF_UNIX unless granted,
    and (while the exec allowlist is in force) executable memfds."""
    families = [socket.AF_NETLINK, socket.AF_PACKET]
    arg_equal = [("socket", 0, fam, errno.EACCES) for fam in families]
    if not unix_sockets:
        arg_equal += [("socket", 0, socket.AF_UNIX, errno.EACCES), ("socketpair", 0, socket.AF_UNIX, errno.EACCES)]
    arg_equal += [("ioctl", 1, TIOCSTI, errno.EPERM), ("ioctl", 1, TIOCLINUX, errno.EPERM)]
    return SeccompTable(
        errno_syscalls=tuple((n, errno.EPERM) for n in DENIED_SYSCALLS) + tuple((n, errno.ENOSYS) for n in ENOSYS_SYSCALLS),
        errno_arg_equal=tuple(arg_equal),
        errno_arg_masked=tuple(("clone", 0, flag, flag, errno.EPERM) for flag in CLONE_NAMESPACE_FLAGS)
        + (() if workdir_exec else (("memfd_create", 1, MFD_NOEXEC_SEAL, 0, errno.EPERM),)),
    )


# --- network ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TcpPlan:
    """What network.allow becomes for Landlock, which can only filter TCP by port."""

    ports: tuple[int, ...]  # ports connect() may reach (on any address: Landlock rules are port-only)
    any_port: tuple[str, ...] = ()  # resolved hosts whose entry pins no port (connect stays unrestricted)
    skipped: tuple[str, ...] = ()  # hosts that did not resolve at launch (contribute nothing)


def plan_tcp(entries: Iterable[object], resolve: Callable[[str], bool]) -> TcpPlan:
    """Resolve each allow entry's host at launch; unresolvable hosts are skipped (spec)."""
    ports: set[int] = set()
    any_port: list[str] = []
    skipped: list[str] = []
    for entry in entries:
        host = getattr(entry, "host")
        if not resolve(host):
            skipped.append(host)
            continue
        port = entry.ports()  # type: ignore[attr-defined]
        if port is None:
            any_port.append(host)
        else:
            ports.add(port)
    return TcpPlan(tuple(sorted(ports)), tuple(dict.fromkeys(any_port)), tuple(dict.fromkeys(skipped)))


# --- landlock ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathGrant:
    path: str
    access: int  # Landlock access bits (already masked to the ABI)
    reason: str  # "workdir", "binary bash", "device", "interpreter_runtime python3", "locale data"

    @property
    def rights(self) -> list[str]:
        return ll.rights_names(self.access)


@dataclass(frozen=True)
class LandlockPolicy:
    abi: int
    handled_fs: int
    grants: tuple[PathGrant, ...]
    handled_net: int  # NET_CONNECT_TCP / NET_BIND_TCP bits the ruleset restricts
    tcp_connect: tuple[int, ...]
    scoped: int  # SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET with ABI >= 6


EXEC_READ = ll.READ_FILE | ll.EXECUTE
DEVICES = (
    ("/dev/null", ll.READ_FILE | ll.WRITE_FILE | ll.TRUNCATE | ll.IOCTL_DEV),
    ("/dev/zero", ll.READ_FILE),
    ("/dev/urandom", ll.READ_FILE),
)
# Read-only data, never executable: without it every program falls back to the C locale and bash
# prints a setlocale warning on each call when LC_ALL is set.
LOCALE_DIRS = ("/usr/lib/locale",)


def workdir_access(abi: int, workdir_exec: bool) -> int:
    """Near-full rights on the workdir, minus device/socket creation and (unless granted) execute."""
    bits = ll.fs_rights_for_abi(abi) & ~(ll.MAKE_CHAR | ll.MAKE_BLOCK | ll.MAKE_SOCK)
    return bits if workdir_exec else bits & ~ll.EXECUTE


def landlock_policy(abi: int, workdir: str, *, workdir_exec: bool, closures: dict[str, tuple[str, ...]],
                    interpreter_runtime: Iterable[object], tcp: TcpPlan, existing: Callable[[str], bool],
                    readonly: Iterable[str] = ()) -> LandlockPolicy:
    """Grants: workdir rw, each binary's closure r+x, fixed devices, interpreter_runtime dirs, TCP ports,
    and ``readonly`` dirs (the session's logs, outside the workdir) read + list only."""
    handled = ll.fs_rights_for_abi(abi)
    grants: list[PathGrant] = [PathGrant(workdir, workdir_access(abi, workdir_exec) & handled, "workdir")]
    grants += [PathGrant(path, (ll.READ_FILE | ll.READ_DIR) & handled, "session logs (read-only)") for path in readonly]
    seen = {workdir, *readonly}
    for name, files in closures.items():
        for path in files:
            if path not in seen:
                seen.add(path)
                grants.append(PathGrant(path, EXEC_READ & handled, f"binary {name}"))
    for path, bits in DEVICES:
        if existing(path):
            grants.append(PathGrant(path, bits & handled, "device"))
    for grant in interpreter_runtime:
        for d in getattr(grant, "dirs"):
            bits = EXEC_READ | (ll.READ_DIR if d.list_dir else 0)
            if existing(d.path):
                grants.append(PathGrant(d.path, bits & handled, f"interpreter_runtime {getattr(grant, 'binary')}"))
    for path in LOCALE_DIRS:
        if existing(path):
            grants.append(PathGrant(path, (ll.READ_FILE | ll.READ_DIR) & handled, "locale data"))
    handled_net = 0
    if abi >= 4:
        handled_net = ll.NET_BIND_TCP | (0 if tcp.any_port else ll.NET_CONNECT_TCP)
    scoped = (ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0
    return LandlockPolicy(abi, handled, tuple(grants), handled_net, tcp.ports if abi >= 4 else (), scoped)


# --- rlimits ----------------------------------------------------------------------------------

RLIM_INFINITY = -1


def rlimits(resources: object, nproc_baseline: int, hard_limits: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """Hard limits (cur == max), spec defaults; values above the inherited hard limit are clamped."""
    wanted = {
        "NPROC": nproc_baseline + getattr(resources, "max_processes"),
        "NOFILE": getattr(resources, "max_open_files"),
        "FSIZE": getattr(resources, "max_file_size_bytes"),
        "CPU": getattr(resources, "cpu_seconds"),
        "AS": getattr(resources, "memory_bytes"),
        "CORE": 0,
    }
    out = []
    for name, value in wanted.items():
        hard = hard_limits.get(name, RLIM_INFINITY)
        out.append((name, value if hard == RLIM_INFINITY or hard < 0 else min(value, hard)))
    return tuple(out)


# --- the whole policy -------------------------------------------------------------------------


@dataclass(frozen=True)
class ShellPolicy:
    tier: str  # "full" | "seccomp-only" | "environment-only" (the probe's verdict)
    landlock: LandlockPolicy | None
    seccomp: SeccompTable | None
    rlimits: tuple[tuple[str, int], ...]
    cgroup: CgroupLimits | None  # None off Linux
    run_as: tuple[int, int] | None  # (uid, gid) to drop to when mur runs as root
    tcp: TcpPlan = field(default_factory=lambda: TcpPlan(()))
    unix_sockets: bool = False
    noexec_workdir: str | None = None  # re-mounted noexec in a private mount namespace (root only)


def build_policy(caps: object, workdir: str, probe: object, *, closures: dict[str, tuple[str, ...]],
                 tcp: TcpPlan, is_root: bool, nproc_baseline: int, hard_limits: dict[str, int],
                 existing: Callable[[str], bool], private_mounts: bool = False,
                 readonly: tuple[str, ...] = ()) -> ShellPolicy:
    """Everything the appliers need, derived from the manifest and what was measured on this host."""
    linux = getattr(probe, "os") == "linux"
    shell = getattr(caps, "shell")
    network = getattr(caps, "network")
    fs_caps = getattr(caps, "filesystem")
    resources = getattr(caps, "resources")
    abi = getattr(probe, "landlock_abi")
    landlock = None
    if linux and abi > 0:
        landlock = landlock_policy(
            abi, workdir, workdir_exec=bool(getattr(fs_caps, "workdir_exec", False)), closures=closures,
            interpreter_runtime=getattr(shell, "interpreter_runtime", ()) if shell else (), tcp=tcp,
            existing=existing, readonly=readonly,
        )
    workdir_exec = bool(getattr(fs_caps, "workdir_exec", False))
    seccomp = seccomp_table(bool(network.unix_sockets), workdir_exec) if linux and getattr(probe, "seccomp") else None
    cgroup = None
    if linux:
        cgroup = CgroupLimits(
            memory_bytes=resources.cgroup_memory_bytes, pids_max=resources.cgroup_pids_max,
            cpu_percent=resources.cgroup_cpu_percent, io_bytes_per_sec=resources.cgroup_io_bytes_per_sec,
        )
    return ShellPolicy(
        tier=getattr(probe, "tier"), landlock=landlock, seccomp=seccomp,
        rlimits=rlimits(resources, nproc_baseline, hard_limits), cgroup=cgroup,
        run_as=(NOBODY, NOBODY) if is_root and linux else None, tcp=tcp,
        unix_sockets=bool(network.unix_sockets),
        noexec_workdir=workdir if linux and is_root and private_mounts and not workdir_exec else None,
    )


def explain_grants(caps: object, workdir: str, abi: int = ll.MAX_KNOWN_ABI) -> list[tuple[str, list[str], str]]:
    """(path, rights, reason) Landlock would grant, for ``--explain-scope``.

    Like the spec's report it skips DNS and the DT_NEEDED closure (fast, read-only): the allowed
    binaries' own files are not listed; they are resolved at launch.
    """
    shell = getattr(caps, "shell")
    fs_caps = getattr(caps, "filesystem")
    policy = landlock_policy(
        max(abi, 1), workdir, workdir_exec=bool(getattr(fs_caps, "workdir_exec", False)), closures={},
        interpreter_runtime=getattr(shell, "interpreter_runtime", ()) if shell else (), tcp=TcpPlan(()),
        existing=lambda _path: True,
    )
    return [(g.path, g.rights, g.reason) for g in policy.grants]
