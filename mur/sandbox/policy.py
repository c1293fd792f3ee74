"""The shell sandbox policy as data: capabilities + workdir + host probe -> ``ShellPolicy``.

Pure: no syscalls, no filesystem access. Everything measured on the host (the probe, the binaries'
resolved closures, which network.allow hosts resolve, the session uid, the namespaces created, the
uid's process count, the inherited hard limits) comes in as arguments, so the whole policy can be
asserted in unit tests and printed by ``--explain-scope``. This is the one place that decides: the
seccomp allowlist and its argument rules (socket families/types/protocols, pid-targeting calls),
the Landlock grants, which network mechanism carries network.allow and what the egress proxy
admits, which namespaces a session gets. The thin appliers (landlock.py, seccomp.py, rlimits.py,
cgroups.py, namespaces.py, egress.py, spawn.py) turn it into kernel state.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field
from typing import Callable, Iterable

from mur.sandbox import landlock as ll
from mur.sandbox import syscalls
from mur.sandbox.cgroups import CgroupLimits
from mur.sandbox.diskplan import DiskPlan
from mur.sandbox.viewplan import ViewPlan

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})

# --- seccomp ----------------------------------------------------------------------------------

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
# send*(MSG_FASTOPEN) on a TCP socket connects as it sends, without the connect() hook Landlock's
# TCP rules sit on.
MSG_FASTOPEN = 0x20000000
AF_MAX = 46  # address families the kernel numbers (include/linux/socket.h); anything past it too
SOCK_TYPE_MASK = 0xF  # the type in socket()'s second argument, below SOCK_NONBLOCK / SOCK_CLOEXEC
SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET = 1, 2, 5
IPPROTO_TCP = 6
PRIO_USER, IOPRIO_WHO_USER = 2, 3  # "every process of this uid"
LOW32 = 0xFFFFFFFF  # int arguments: the kernel reads the low 32 bits of the register
# Syscalls whose first argument names a process (0 = the caller) and changes it.
PID_FIRST = ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")


@dataclass(frozen=True)
class ArgRule:
    """Refuse ``syscall`` with ``errno`` when every condition holds (none: always).

    A condition is (argument index, op, value, mask): op "eq", "ne" and "gt" compare the full
    64-bit register, "masked_eq" compares ``argument & mask`` with value.
    """

    syscall: str
    errno: int
    conditions: tuple[tuple[int, str, int, int], ...] = ()


@dataclass(frozen=True)
class SeccompTable:
    """Two filters, compiled by ``mur.sandbox.seccomp`` and stacked in the child.

    The allowlist: ``allow`` runs, ``allow_if`` runs when that argument equals that value,
    ``refuse`` gets its errno, every other syscall gets ``default_errno``; a foreign-architecture
    syscall kills the process. Then the refinements (``rules``, default allow) narrow what the
    allowlist lets through by argument: which socket families, types and protocols, which clone
    flags, which processes. The kernel runs both and the stricter answer wins, which is how a
    per-syscall errno (EACCES for a refused socket, as the spec says) sits beside a default one.
    """

    allow: tuple[str, ...]
    allow_if: tuple[tuple[str, int, int], ...]
    refuse: tuple[tuple[str, int], ...]
    rules: tuple[ArgRule, ...]
    default_errno: int = errno.ENOSYS


@dataclass(frozen=True)
class SocketGrant:
    """Which sockets a tool may create: family -> (types, protocols), all else refused with EACCES."""

    families: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]
    bind: bool  # bind() (TCP bind is still refused by Landlock; this is for AF_UNIX)
    listen: bool  # listen(); never while an inet socket could autobind on a host interface


def socket_grant(*, unix: bool, inet: bool, private_net: bool) -> SocketGrant:
    """The allowlist by family/type/protocol: TCP only with a network grant, AF_UNIX only with
    ``unix_sockets: true``; UDP, raw, MPTCP, SCTP, vsock, netlink, packet, ... never."""
    families: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []
    if unix:
        families.append((socket.AF_UNIX, (SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET), (0,)))
    if inet:
        families += [(socket.AF_INET, (SOCK_STREAM,), (0, IPPROTO_TCP)),
                     (socket.AF_INET6, (SOCK_STREAM,), (0, IPPROTO_TCP))]
    # listen() on an unbound TCP socket autobinds an ephemeral port on every interface: only
    # harmless inside the session's own network namespace.
    return SocketGrant(tuple(families), bind=unix, listen=unix and (not inet or private_net))


def socket_rules(grant: SocketGrant) -> list[ArgRule]:
    """The complement of the grant as refusal rules (one comparison per argument per rule is all
    libseccomp allows, so the gaps are spelled out; a value with high bits set is refused)."""
    deny = errno.EACCES
    allowed = {fam: (types, protos) for fam, types, protos in grant.families}
    rules = [ArgRule("socket", deny, ((0, "eq", fam, 0),)) for fam in range(AF_MAX) if fam not in allowed]
    rules.append(ArgRule("socket", deny, ((0, "gt", AF_MAX - 1, 0),)))
    for fam, (types, protos) in allowed.items():
        rules += [ArgRule("socket", deny, ((0, "eq", fam, 0), (1, "masked_eq", t, SOCK_TYPE_MASK)))
                  for t in range(SOCK_TYPE_MASK + 1) if t not in types]
        top = max(protos)
        for t in types:
            kind = ((0, "eq", fam, 0), (1, "masked_eq", t, SOCK_TYPE_MASK))
            rules += [ArgRule("socket", deny, kind + ((2, "eq", p, 0),)) for p in range(top) if p not in protos]
            rules.append(ArgRule("socket", deny, kind + ((2, "gt", top, 0),)))
    if socket.AF_UNIX in allowed:
        rules.append(ArgRule("socketpair", deny, ((0, "ne", socket.AF_UNIX, 0),)))
    else:
        rules.append(ArgRule("socketpair", deny))
    if not grant.bind:
        rules.append(ArgRule("bind", deny))
    if not grant.listen:
        rules.append(ArgRule("listen", deny))
    for name, flags_arg in (("sendto", 3), ("sendmsg", 2), ("sendmmsg", 3)):
        rules.append(ArgRule(name, deny, ((flags_arg, "masked_eq", MSG_FASTOPEN, MSG_FASTOPEN),)))
    return rules


def process_rules() -> list[ArgRule]:
    """Calls that act on another process by pid, confined to the caller (pid 0) and its process
    group: for tools that share a uid with processes outside their session -- mur, and in a pid
    namespace its init -- (kill(2) itself is Landlock's signal scope; kill(-1) is refused here)."""
    deny = errno.EPERM
    rules = [ArgRule(name, deny, ((0, "ne", 0, 0),)) for name in PID_FIRST]
    rules += [
        ArgRule("setpriority", deny, ((0, "masked_eq", PRIO_USER, LOW32),)),
        ArgRule("setpriority", deny, ((1, "ne", 0, 0),)),
        ArgRule("ioprio_set", deny, ((0, "masked_eq", IOPRIO_WHO_USER, LOW32),)),
        ArgRule("ioprio_set", deny, ((1, "ne", 0, 0),)),
        ArgRule("kill", deny, ((0, "masked_eq", LOW32, LOW32),)),  # kill(-1): every process of the uid
    ]
    return rules


def seccomp_table(sockets: SocketGrant, *, workdir_exec: bool = False, confine_pids: bool = False) -> SeccompTable:
    """The allowlist (``mur.sandbox.syscalls``) plus the argument rules this session needs."""
    rules = socket_rules(sockets)
    rules += [ArgRule("ioctl", errno.EPERM, ((1, "masked_eq", cmd, LOW32),)) for cmd in (TIOCSTI, TIOCLINUX)]
    rules += [ArgRule("clone", errno.EPERM, ((0, "masked_eq", flag, flag),)) for flag in CLONE_NAMESPACE_FLAGS]
    if not workdir_exec:
        rules.append(ArgRule("memfd_create", errno.EPERM, ((1, "masked_eq", 0, MFD_NOEXEC_SEAL),)))
    if confine_pids:
        rules += process_rules()
    return SeccompTable(
        allow=syscalls.ALLOWED,
        allow_if=tuple(("personality", 0, value) for value in syscalls.PERSONALITY_VALUES),
        refuse=tuple((n, errno.EPERM) for n in syscalls.REFUSED) + tuple((n, errno.ENOSYS) for n in syscalls.ENOSYS),
        rules=tuple(rules),
    )


# --- network ----------------------------------------------------------------------------------

PROXY_HOST, PROXY_PORT = "127.0.0.1", 3128  # inside the session's network namespace: nothing else listens
PROXY_ENV_NAMES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
NO_PROXY_NAMES = ("no_proxy", "NO_PROXY")  # would send a tool around the proxy, into a closed namespace


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


# How shell tools reach the network, strongest first:
#   proxy       a private network namespace (only loopback) whose one way out is mur's egress proxy,
#               which admits exactly the allowed hosts (CONNECT host, TLS SNI, Host header)
#   ports       no namespace possible: Landlock TCP rules, port-only (any address on an allowed port)
#   unfiltered  no namespace and Landlock < ABI 4, or an entry without a port: TCP connect anywhere
#   none        no network grant: no inet socket at all
NETWORK_MECHANISMS = {
    "proxy": "netns+egress-proxy",
    "ports": "landlock-tcp-ports",
    "unfiltered": "unfiltered-tcp",
    "none": "no-inet-sockets",
}


@dataclass(frozen=True)
class NetworkPlan:
    mode: str  # a NETWORK_MECHANISMS key
    allow: tuple[object, ...] = ()  # the AllowEntry objects in force (resolved at launch)
    tcp: TcpPlan = field(default_factory=lambda: TcpPlan(()))

    @property
    def mechanism(self) -> str:
        return NETWORK_MECHANISMS[self.mode]

    @property
    def inet(self) -> bool:
        return self.mode != "none"

    @property
    def proxy(self) -> bool:
        return self.mode == "proxy"


def plan_network(entries: Iterable[object], resolve: Callable[[str], bool], *, private_net: bool,
                 landlock_abi: int) -> NetworkPlan:
    """Which mechanism carries network.allow for shell tools on this host (hosts that do not resolve
    at launch are skipped, as the spec says, whatever the mechanism)."""
    entries = list(entries)
    tcp = plan_tcp(entries, resolve)
    kept = tuple(e for e in entries if getattr(e, "host") not in tcp.skipped)
    if not kept:
        return NetworkPlan("none", (), tcp)
    if private_net:
        return NetworkPlan("proxy", kept, tcp)
    if landlock_abi >= 4 and not tcp.any_port:
        return NetworkPlan("ports", kept, tcp)
    return NetworkPlan("unfiltered", kept, tcp)


def egress_allowed(allow: Iterable[object], host: str, port: int, protocol: str | None) -> bool:
    """May the proxy open host:port for a tool? ``protocol`` is what the tool's first bytes are:
    "https" (a TLS ClientHello), "http" (a request), None (anything else: only an entry that pins
    no scheme admits it). Host matching is the allow-list's own (spec: pattern match, no DNS)."""
    for entry in allow:
        if protocol is None:
            if getattr(entry, "scheme") is None and entry.matches("", host, port):  # type: ignore[attr-defined]
                return True
        elif entry.matches(protocol, host, port):  # type: ignore[attr-defined]
            return True
    return False


def egress_target_allowed(allow: Iterable[object], host: str, port: int) -> bool:
    """Could any protocol reach host:port (the CONNECT check, before the first bytes are seen)?"""
    return any(egress_allowed(allow, host, port, p) for p in ("https", "http", None))


def proxy_env(plan: NetworkPlan) -> dict[str, str]:
    """HTTP(S)_PROXY / ALL_PROXY (both spellings: curl reads only the lower-case http_proxy)."""
    if not plan.proxy:
        return {}
    url = f"http://{PROXY_HOST}:{PROXY_PORT}"
    return {name: url for name in PROXY_ENV_NAMES}


# --- other processes --------------------------------------------------------------------------

NAMESPACES = ("user", "net", "ipc", "mnt", "pid")  # the order a tool joins them (user first: it grants the rest)


def plan_namespaces(*, is_root: bool, private_net: bool, userns: bool) -> tuple[str, ...]:
    """The private namespaces a session's tools run in, as far as this host allows.

    net + ipc + mnt + pid (mnt: the read-only mount view, and the noexec workdir unless
    workdir_exec). As root tools also get a uid of their own; as
    another user everything comes from an unprivileged user namespace (+ user), the pid namespace
    standing in for the uid tools then share with mur. Either way the pid namespace keeps the
    session's spawner (zygote.py), which shares the tools' uid, out of their reach.
    """
    if not private_net:
        return ()
    wanted = {"net", "ipc", "mnt", "pid"}
    if not is_root:
        if not userns:
            return ()
        wanted |= {"user"}
    return tuple(n for n in NAMESPACES if n in wanted)


def process_isolation(run_as: tuple[int, int] | None, namespaces: Iterable[str], landlock_abi: int) -> str:
    """How a tool is kept from acting on processes outside its session (for reports and the log)."""
    if run_as is not None:
        return "session-uid"
    if "pid" in set(namespaces):
        return "pid-namespace"
    return "landlock-scope+seccomp" if landlock_abi >= 6 else "seccomp-only"


# --- landlock ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PathGrant:
    path: str
    access: int  # Landlock access bits (already masked to the ABI)
    reason: str  # "workdir", "binary bash", "device", "interpreter_runtime python3", "locale data"


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
# In a composed root (viewplan.py) the view shows these too; on the host they stay ungranted.
VIEW_DEVICES = (
    ("/dev/full", ll.READ_FILE | ll.WRITE_FILE | ll.TRUNCATE),
    ("/dev/random", ll.READ_FILE),
)
PROC_RIGHTS = ll.READ_FILE | ll.READ_DIR  # /proc of the session's own pid namespace, subset=pid
# Read-only data, never executable: without it every program falls back to the C locale and bash
# prints a setlocale warning on each call when LC_ALL is set.
LOCALE_DIRS = ("/usr/lib/locale",)
# Public CA certificates (Debian, then Fedora/RHEL layouts), read-only: https through the proxy
# verifies the origin's certificate end to end, so curl, git and python need the bundle.
TRUST_STORE_DIRS = ("/etc/ssl/certs", "/usr/share/ca-certificates", "/etc/pki/ca-trust/extracted", "/etc/pki/tls/certs")


def workdir_access(abi: int, workdir_exec: bool) -> int:
    """Near-full rights on the workdir, minus device/socket creation and (unless granted) execute."""
    bits = ll.fs_rights_for_abi(abi) & ~(ll.MAKE_CHAR | ll.MAKE_BLOCK | ll.MAKE_SOCK)
    return bits if workdir_exec else bits & ~ll.EXECUTE


def landlock_policy(abi: int, workdir: str, *, workdir_exec: bool, closures: dict[str, tuple[str, ...]],
                    interpreter_runtime: Iterable[object], network: NetworkPlan,
                    existing: Callable[[str], bool], readonly: Iterable[str] = (), tmp: str | None = None,
                    composed: bool = False) -> LandlockPolicy:
    """Grants: workdir rw, each binary's closure r+x, fixed devices, interpreter_runtime dirs, the
    TLS trust store (with a network grant), TCP ports, and ``readonly`` dirs (the session's logs,
    outside the workdir) read + list only. In a composed root (``composed``) also the private
    ``tmp`` (as the workdir), /proc (read) and the view's other devices: they are the session's own
    there, not the host's."""
    handled = ll.fs_rights_for_abi(abi)
    grants: list[PathGrant] = [PathGrant(workdir, workdir_access(abi, workdir_exec) & handled, "workdir")]
    if tmp is not None:
        grants.append(PathGrant(tmp, workdir_access(abi, workdir_exec) & handled, "private /tmp"))
    grants += [PathGrant(path, (ll.READ_FILE | ll.READ_DIR) & handled, "session logs (read-only)") for path in readonly]
    seen = {workdir, *readonly}
    for name, files in closures.items():
        for path in files:
            if path not in seen:
                seen.add(path)
                grants.append(PathGrant(path, EXEC_READ & handled, f"binary {name}"))
    for path, bits in DEVICES + (VIEW_DEVICES if composed else ()):
        if existing(path):
            grants.append(PathGrant(path, bits & handled, "device"))
    if composed:
        grants.append(PathGrant("/proc", PROC_RIGHTS & handled, "the session's /proc"))
    for grant in interpreter_runtime:
        for d in getattr(grant, "dirs"):
            bits = EXEC_READ | (ll.READ_DIR if d.list_dir else 0)
            if existing(d.path):
                grants.append(PathGrant(d.path, bits & handled, f"interpreter_runtime {getattr(grant, 'binary')}"))
    data = [(p, "locale data") for p in LOCALE_DIRS]
    if network.inet:
        data += [(p, "TLS trust store (network.allow)") for p in TRUST_STORE_DIRS]
    for path, reason in data:
        if existing(path):
            grants.append(PathGrant(path, (ll.READ_FILE | ll.READ_DIR) & handled, reason))
    handled_net, ports = 0, ()
    if abi >= 4:
        if network.proxy:  # the namespace holds nothing but the proxy; Landlock pins it anyway
            handled_net, ports = ll.NET_BIND_TCP | ll.NET_CONNECT_TCP, (PROXY_PORT,)
        elif network.mode == "none":
            handled_net = ll.NET_BIND_TCP | ll.NET_CONNECT_TCP
        else:
            handled_net = ll.NET_BIND_TCP | (0 if network.tcp.any_port else ll.NET_CONNECT_TCP)
            ports = network.tcp.ports
    scoped = (ll.SCOPE_SIGNAL | ll.SCOPE_ABSTRACT_UNIX_SOCKET) if abi >= 6 else 0
    return LandlockPolicy(abi, handled, tuple(grants), handled_net, ports, scoped)


# --- rlimits ----------------------------------------------------------------------------------

RLIM_INFINITY = -1


def rlimits(resources: object, nproc_baseline: int, hard_limits: dict[str, int],
            nproc_is_aggregate: bool = False) -> tuple[tuple[str, int], ...]:
    """Hard limits (cur == max), spec defaults; values above the inherited hard limit are clamped.
    ``nproc_is_aggregate``: no pids.max bounds the tool tree, so RLIMIT_NPROC stands in for it and
    its headroom is capped at cgroup_pids_max as well."""
    headroom = getattr(resources, "max_processes")
    if nproc_is_aggregate:
        headroom = min(headroom, getattr(resources, "cgroup_pids_max"))
    wanted = {
        "NPROC": nproc_baseline + headroom,
        "NOFILE": getattr(resources, "max_open_files"),
        "FSIZE": getattr(resources, "max_file_size_bytes"),
        "CPU": getattr(resources, "cpu_seconds"),
        "AS": getattr(resources, "memory_bytes"),
        # 1, not the spec's 0: with a pipe core_pattern (systemd-coredump, apport) the kernel ignores
        # RLIMIT_CORE and hands a crashing tool's memory to a root helper, unless the limit is exactly
        # 1, which it reads as "abort the dump"; a 1-byte limit also writes no core file (< one page).
        "CORE": 1,
    }
    out = []
    for name, value in wanted.items():
        hard = hard_limits.get(name, RLIM_INFINITY)
        out.append((name, value if hard == RLIM_INFINITY or hard < 0 else min(value, hard)))
    return tuple(out)


# --- the aggregate bound ----------------------------------------------------------------------

# What bounds the whole tool tree (memory, tasks), strongest first:
#   session-cgroup          a cgroup of the session's own (cgroups.py)
#   enclosing-cgroup        the cgroup mur runs in and cannot leave or raise (enclosing.py), shared with mur
#   enclosing-cgroup+nproc  the same for memory; its tasks bounded by the tools' RLIMIT_NPROC (no pids.max)
AGGREGATE_BOUNDS = ("session-cgroup", "enclosing-cgroup", "enclosing-cgroup+nproc")
# Tools sharing mur's cgroup are the OOM killer's first choice, so a tool's memory bomb never takes
# the runtime down with it (a process may raise its own oom_score_adj; lowering it needs a capability).
SHARED_CGROUP_OOM_SCORE_ADJ = 1000


# --- the whole policy -------------------------------------------------------------------------


@dataclass(frozen=True)
class ShellPolicy:
    tier: str  # "full" | "seccomp-only" | "environment-only" (the probe's verdict)
    landlock: LandlockPolicy | None
    seccomp: SeccompTable | None
    rlimits: tuple[tuple[str, int], ...]
    cgroup: CgroupLimits | None  # None off Linux
    run_as: tuple[int, int] | None  # the session's own (uid, gid) when mur runs as root
    network: NetworkPlan = field(default_factory=lambda: NetworkPlan("none"))
    sockets: SocketGrant = field(default_factory=lambda: socket_grant(unix=False, inet=False, private_net=False))
    unix_sockets: bool = False
    namespaces: tuple[str, ...] = ()  # private namespaces the tools join, in NAMESPACES order
    noexec_workdir: str | None = None  # re-mounted noexec in the session's mount namespace
    processes: str = "seccomp-only"  # process_isolation()
    aggregate: str = "session-cgroup"  # an AGGREGATE_BOUNDS value
    oom_score_adj: int | None = None  # written to /proc/self/oom_score_adj by the spawner; every tool inherits it
    view: ViewPlan | None = None  # the composed root the tools run in (None: they see the host)
    disk: DiskPlan | None = None  # what counts the workdir's bytes
    host_view: str = "host"  # a HOST_VIEWS key
    view_reason: str | None = None  # why the view is not a composed root, when it is not

    @property
    def tcp(self) -> TcpPlan:
        return self.network.tcp

    @property
    def mechanism(self) -> str:
        """The enforcement mechanism in force, as upstream names it."""
        base = {"full": "landlock+seccomp", "seccomp-only": "seccomp-only"}.get(self.tier, "none")
        return f"mountns+pivot_root+{base}" if self.view is not None and base == "landlock+seccomp" else base


# What the tools see of the host, strongest first (namespaces.py, rootfs.py)
HOST_VIEWS = {
    "composed-root": "a root built for the session (mount namespace + pivot_root): the workdir, a private /tmp, "
                     "/dev, the session's /proc and the granted paths; everything else does not exist",
    "read-only-host": "the host's tree, read-only outside the workdir (Landlock closes what is not granted; "
                      "metadata outside the grants stays readable)",
    "host": "the host's tree as mur sees it (Landlock closes what is not granted; metadata outside the grants "
            "stays readable, and changeable where the tools' uid owns it)",
}

def build_policy(caps: object, workdir: str, probe: object, *, closures: dict[str, tuple[str, ...]],
                 network: NetworkPlan, run_as: tuple[int, int] | None, namespaces: Iterable[str],
                 nproc_baseline: int, hard_limits: dict[str, int], existing: Callable[[str], bool],
                 readonly: tuple[str, ...] = (), aggregate: str = "session-cgroup", tmp: str | None = None,
                 composed: bool = False, view: ViewPlan | None = None, disk: DiskPlan | None = None,
                 host_view: str | None = None, view_reason: str | None = None) -> ShellPolicy:
    """Everything the appliers need, derived from the manifest and what was measured on this host.

    ``run_as`` is the session uid leased for this session (root only); ``namespaces`` the private
    namespaces actually created for it; ``network`` the plan_network() result for them;
    ``readonly`` the session's logs directory when it is outside the workdir; ``aggregate`` what
    bounds the tool tree (AGGREGATE_BOUNDS); ``composed``/``tmp``: the tools run in a composed root
    with that private /tmp (its Landlock grants), ``view``/``disk``/``host_view`` are carried as
    decided (mur.sandbox.decide).
    """
    linux = getattr(probe, "os") == "linux"
    shell = getattr(caps, "shell")
    fs_caps = getattr(caps, "filesystem")
    resources = getattr(caps, "resources")
    abi = getattr(probe, "landlock_abi")
    namespaces = tuple(n for n in NAMESPACES if n in set(namespaces)) if linux else ()
    workdir_exec = bool(getattr(fs_caps, "workdir_exec", False))
    unix = bool(getattr(caps, "network").unix_sockets)
    landlock = None
    if linux and abi > 0:
        landlock = landlock_policy(
            abi, workdir, workdir_exec=workdir_exec, closures=closures,
            interpreter_runtime=getattr(shell, "interpreter_runtime", ()) if shell else (), network=network,
            existing=existing, readonly=readonly, tmp=tmp, composed=composed,
        )
    run_as = run_as if linux else None
    sockets = socket_grant(unix=unix, inet=network.inet, private_net="net" in namespaces)
    # Tools sharing mur's uid are confined to pid 0 even in their pid namespace: its init (the
    # reaper) has their uid too, and a prlimit(1, RLIMIT_CPU, 0) would take the namespace down.
    confine = run_as is None
    seccomp = seccomp_table(sockets, workdir_exec=workdir_exec, confine_pids=confine) \
        if linux and getattr(probe, "seccomp", getattr(probe, "tier", "") != "environment-only") else None
    cgroup = None
    if linux:
        cgroup = CgroupLimits(
            memory_bytes=resources.cgroup_memory_bytes, pids_max=resources.cgroup_pids_max,
            cpu_percent=resources.cgroup_cpu_percent, io_bytes_per_sec=resources.cgroup_io_bytes_per_sec,
        )
    return ShellPolicy(
        tier=getattr(probe, "tier"), landlock=landlock, seccomp=seccomp,
        rlimits=rlimits(resources, nproc_baseline, hard_limits, nproc_is_aggregate=aggregate.endswith("+nproc")),
        cgroup=cgroup, run_as=run_as, aggregate=aggregate,
        oom_score_adj=SHARED_CGROUP_OOM_SCORE_ADJ if linux and aggregate != "session-cgroup" else None,
        network=network, sockets=sockets, unix_sockets=unix, namespaces=namespaces,
        noexec_workdir=workdir if "mnt" in namespaces and not workdir_exec else None,
        processes=process_isolation(run_as, namespaces, abi if linux else 0),
        view=view, disk=disk, view_reason=view_reason,
        host_view=host_view or ("composed-root" if view is not None else "read-only-host" if "mnt" in namespaces
                                else "host"),
    )
