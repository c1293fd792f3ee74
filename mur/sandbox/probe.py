"""What this host can enforce, measured (never inferred from the kernel version string).

``probe_host()`` forks a child that builds and *applies* a real Landlock ruleset and the seccomp
allowlist a session installs, and reports which worked; it also tries to create (and removes) a
cgroup with pids and memory limits (else it reads the limits of the cgroup it runs in), the private
namespaces a session would run its tools in (network + IPC as root; user + network + pid
otherwise), and builds and verifies a composed root with a session disk in a holder child
(``probeview``: ``sealed``, and which disk ceiling the kernel can count here). The result is cached per process, and on
disk per boot, kernel, uid and process context (``probecache``: what the key holds, and what it
cannot see); ``refresh=True`` measures again and rewrites the disk cache, MUR_PROBE_CACHE=off skips
it. ``python -m mur.sandbox.probe`` prints it as one JSON line (the deploy helper runs that on
remote targets).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
from dataclasses import asdict, dataclass

REASON_NO_LANDLOCK = (
    "scoped requires Landlock filesystem mediation (Linux 5.13+ with a usable Landlock ABI); this host "
    "provides no kernel filesystem mediation, so paths outside the workdir are constrained by convention only"
)


@dataclass(frozen=True)
class HostProbe:
    os: str  # platform.system().lower()
    landlock_abi: int  # 0 = unavailable; measured by applying a ruleset in a forked child
    seccomp: bool  # a seccomp filter was installed in a forked child
    tier: str  # "full" | "seccomp-only" | "environment-only"
    mechanism: str  # "landlock+seccomp" | "seccomp-only" | "none"
    achieved: str  # "scoped" when tier == "full", else "advisory"
    reason: str | None  # why the host is not scoped (None when scoped)
    cgroup_mode: str  # "unified" | "hybrid" | "legacy" | "none"
    cgroup_delegated: bool  # a child cgroup with pids+memory limits could be created just now
    systemd: bool  # /run/systemd/system exists
    # Defaults keep older remote probe JSON (deploy targets) readable.
    root: bool = False  # mur runs as root: tools get a session uid of their own
    netns: bool = False  # a private network namespace could be created (as root, or in a user namespace)
    userns: bool = False  # an unprivileged user namespace could be created (what non-root needs)
    # No cgroup could be created, but the one mur runs in has limits it cannot change (enclosing.py):
    # EnclosingBound's fields; whether they are at or below a capsule's bounds is the capsule's question.
    enclosing: dict | None = None
    sealed: bool = False  # a composed root (mount namespace + pivot_root) was built and verified (probeview)
    sealed_reason: str | None = None  # the precise blocker when not
    disk_loop: bool = False  # a loop-mounted ext4 session disk was made and refused a write past it (root)
    disk_tmpfs: bool = False  # a tmpfs session disk was (in the session's kind of mount namespace)
    disk_reason: str | None = None  # why no (loop) disk, when there is none


_cache: HostProbe | None = None
_lock = threading.Lock()


def _real_filter() -> "object | None":
    """The allowlist a session would install (libseccomp-compiled), or None without libseccomp."""
    from mur.sandbox import seccomp

    module = seccomp.load_module()
    if module is None:
        return None
    from mur.sandbox.policy import seccomp_table, socket_grant

    try:
        return seccomp.compile_filter(seccomp_table(socket_grant(unix=False, inet=True, private_net=True)), module)
    except OSError:
        return None


def _kernel_checks() -> tuple[int, bool, str | None]:
    """(landlock ABI applied, seccomp installed, detail) measured in a forked child."""
    from mur.sandbox import landlock  # here, not at the top: a process that reads the cache never needs it

    abi = landlock.abi_version()
    program = _real_filter()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: only syscalls, then _exit
        os.close(read_fd)
        ll_ok = sc_ok = 0
        try:
            if abi > 0:
                rs = landlock.build_ruleset(
                    abi, landlock.fs_rights_for_abi(abi), [("/", landlock.READ_FILE | landlock.READ_DIR)],
                    handled_net=(landlock.NET_BIND_TCP if abi >= 4 else 0),
                    scoped=(landlock.SCOPE_SIGNAL if abi >= 6 else 0),
                )
                landlock.restrict_self(rs.fd)
                ll_ok = 1
        except BaseException:
            ll_ok = 0
        try:
            if program is not None:
                from mur.sandbox import seccomp

                seccomp.install(program)  # type: ignore[arg-type]
                sc_ok = 1
        except BaseException:
            sc_ok = 0
        os.write(write_fd, bytes([ll_ok, sc_ok]))
        os._exit(0)
    os.close(write_fd)
    try:
        data = os.read(read_fd, 2)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    ll_ok, sc_ok = (data[0], data[1]) if len(data) == 2 else (0, 0)
    detail = None
    if abi == 0:
        detail = "the landlock_create_ruleset syscall is unavailable (kernel < 5.13, Landlock not in lsm=, or filtered)"
    elif not ll_ok:
        detail = f"Landlock ABI {abi} is reported but a ruleset could not be applied"
    return (abi if ll_ok else 0), bool(sc_ok), detail


def _cgroup_checks() -> tuple[str, bool, dict | None]:
    """(mode, a session cgroup could be created, else the enclosing bound's fields or None)."""
    from mur.sandbox import cgroups, enclosing

    try:
        with open("/proc/self/mounts") as fh:
            mode = cgroups.detect_mode(fh.read())
    except OSError:
        return "none", False, None
    if mode == "none":
        return mode, False, None
    name = f"probe-{os.getpid()}-{threading.get_ident() % 100000}"
    try:
        cg = cgroups.create_session_cgroup(
            name, cgroups.CgroupLimits(64 << 20, 16, 100, 100 << 20), mode=mode
        )
    except cgroups.CgroupUnavailable:
        bound = enclosing.find_enclosing()
        return mode, False, asdict(bound) if bound is not None else None
    try:
        cg.remove()
    except OSError:
        pass
    return mode, True, None


def _namespace_checks(root: bool) -> tuple[bool, bool]:
    """(netns, userns): build and discard the namespaces a session would get."""
    from mur.sandbox import namespaces

    userns = not root and namespaces.available(("user", "net", "pid"))
    netns = namespaces.available(("net", "ipc", "pid")) if root else userns
    return netns, userns


def classify(system: str, abi: int, seccomp_ok: bool, detail: str | None, cgroup_mode: str,
             delegated: bool, systemd: bool, *, root: bool = False, netns: bool = False,
             userns: bool = False, enclosing: dict | None = None, view: "object | None" = None) -> HostProbe:
    """The tier / mechanism / achieved class implied by what was measured."""
    if system != "linux":
        return HostProbe(system, 0, False, "environment-only", "none", "advisory", REASON_NO_LANDLOCK,
                         "none", False, systemd, root=root)
    if abi > 0 and seccomp_ok:
        tier, mechanism, reason = "full", "landlock+seccomp", None
    elif seccomp_ok:
        tier, mechanism = "seccomp-only", "seccomp-only"
        reason = REASON_NO_LANDLOCK + (f" ({detail})" if detail else "")
    else:
        tier, mechanism = "environment-only", "none"
        if abi > 0:  # Landlock alone still gets applied by the sandbox; the reported tier stays conservative
            reason = ("scoped requires seccomp syscall filtering as well as Landlock; a seccomp filter could "
                      "not be installed on this host (is libseccomp2 installed?)")
        else:
            reason = REASON_NO_LANDLOCK + (f" ({detail})" if detail else "")
    achieved = "scoped" if tier == "full" else "advisory"
    sealed = bool(getattr(view, "sealed", False))
    sealed_reason = getattr(view, "reason", None) if view is not None else \
        "the composed root was not measured on this host"
    if tier != "full":
        sealed, sealed_reason = False, "sealed builds on scoped: " + (reason or "no kernel enforcement")
    if sealed:
        achieved, mechanism = "sealed", "mountns+pivot_root+" + mechanism
    return HostProbe(system, abi, seccomp_ok, tier, mechanism, achieved, reason, cgroup_mode, delegated, systemd,
                     root=root, netns=netns, userns=userns, enclosing=enclosing, sealed=sealed,
                     sealed_reason=None if sealed else sealed_reason,
                     disk_loop=bool(getattr(view, "disk_loop", False)), disk_tmpfs=bool(getattr(view, "disk_tmpfs", False)),
                     disk_reason=getattr(view, "disk_reason", None))


def _measure() -> HostProbe:
    system = platform.system().lower()
    systemd = os.path.isdir("/run/systemd/system")
    if system != "linux":
        return classify(system, 0, False, None, "none", False, systemd)
    root = os.geteuid() == 0
    abi, sc_ok, detail = _kernel_checks()
    mode, delegated, bound = _cgroup_checks()
    netns, userns = _namespace_checks(root)
    from mur.sandbox import probeview

    view = probeview.check(root, userns)
    return classify(system, abi, sc_ok, detail, mode, delegated, systemd, root=root, netns=netns, userns=userns,
                    enclosing=bound, view=view)


def _from_fields(fields: dict) -> HostProbe | None:
    try:
        return HostProbe(**fields)
    except TypeError:  # a field added or dropped since it was written (the schema version missed it)
        return None


def probe_host(refresh: bool = False) -> HostProbe:
    """The host's enforcement capabilities: measured once per boot and context, then read back from
    the disk cache (see probecache), and held per process (cheap afterwards)."""
    global _cache
    with _lock:
        if _cache is not None and not refresh:
            return _cache
        from mur.sandbox import probecache

        key = probecache.key() if probecache.enabled() else None
        found = None
        if key is not None and not refresh:
            fields = probecache.load(key)
            found = _from_fields(fields) if fields is not None else None
        if found is None:
            found = _measure()
            if key is not None:
                probecache.store(key, asdict(found))
        _cache = found
        return _cache


def main() -> int:
    print(json.dumps(asdict(probe_host())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
