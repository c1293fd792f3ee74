"""A process's security context, as the capsule host compares it, and the per-process settings a
forked capsule takes over from its client.

The host forks a capsule for a client only when the capsule would get exactly the client's
context. Compared (the host's own must equal the client's, else the client runs the capsule
itself): real/effective/saved/fs uids and gids, supplementary groups, the capability sets,
no_new_privs, the seccomp mode and filter count, every namespace, and the LSM label. Taken over by
the capsule from the client (it may differ between services: systemd sets them per unit): the
rlimits, umask, nice value, OOM score adjustment and CPU affinity, and the cgroup of every
hierarchy (the capsule moves itself into the client's; a move the kernel refuses is a refusal).
"""

from __future__ import annotations

import os
import resource

STATUS_KEYS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
               "Seccomp", "Seccomp_filters")
NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "pid_for_children", "time", "time_for_children", "user", "uts")
RLIMITS = tuple(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_"))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def security_context(pid: int | str) -> dict[str, str | None]:
    """What must be equal between the host and a client it serves."""
    status = _read(f"/proc/{pid}/status") or ""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    found: dict[str, str | None] = {}
    for key in STATUS_KEYS:
        raw = fields.get(key)
        found[key] = " ".join(raw.split()) if raw is not None else None
    for ns in NAMESPACES:
        try:
            found[f"ns:{ns}"] = os.readlink(f"/proc/{pid}/ns/{ns}")
        except OSError:
            found[f"ns:{ns}"] = None
    found["lsm"] = (_read(f"/proc/{pid}/attr/current") or "").strip("\0\n ") or None
    return found


def differences(host: dict[str, str | None], client: dict[str, str | None]) -> list[str]:
    return sorted(key for key in set(host) | set(client) if host.get(key) != client.get(key))


def settings(pid: int) -> dict:
    """What a forked capsule takes over from its client `pid` (same uid: readable)."""
    status = _read(f"/proc/{pid}/status") or ""
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    limits = {}
    for res in RLIMITS:
        try:
            limits[res] = resource.prlimit(pid, res)
        except (OSError, ValueError):
            pass
    return {
        "rlimits": limits,
        "umask": int(fields["Umask"].strip(), 8) if "Umask" in fields else None,
        "nice": os.getpriority(os.PRIO_PROCESS, pid),
        "oom_score_adj": (_read(f"/proc/{pid}/oom_score_adj") or "").strip() or None,
        "affinity": sorted(os.sched_getaffinity(pid)),
        "cgroup": _read(f"/proc/{pid}/cgroup") or "",
    }


def take_over(taken: dict) -> str | None:
    """Apply `settings()` of the client to this process (the forked capsule); None, or why not."""
    for res, (soft, hard) in taken["rlimits"].items():
        try:
            if resource.getrlimit(res) != (soft, hard):
                resource.setrlimit(res, (soft, hard))
        except (OSError, ValueError) as exc:
            return f"rlimit {res}: {exc}"  # a higher hard limit than the host's: not ours to give
    if taken["umask"] is not None:
        os.umask(taken["umask"])
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) != taken["nice"]:
            os.setpriority(os.PRIO_PROCESS, 0, taken["nice"])
    except OSError as exc:
        return f"nice {taken['nice']}: {exc}"
    if taken["oom_score_adj"] is not None:
        try:
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write(taken["oom_score_adj"])
        except OSError as exc:
            return f"oom_score_adj: {exc}"
    try:
        os.sched_setaffinity(0, taken["affinity"])
    except OSError as exc:
        return f"cpu affinity: {exc}"
    return join_cgroups(taken["cgroup"])


def _mounts() -> list[tuple[str, str, list[str]]]:
    """(mountpoint, fstype, options) of every cgroup filesystem."""
    from mur.sandbox.cgroups import parse_mounts

    return [(point, kind, opts) for _src, point, kind, opts in parse_mounts(_read("/proc/self/mounts") or "")
            if kind in ("cgroup", "cgroup2")]


def _mountpoint(hierarchy: str, controllers: str, mounts: list[tuple[str, str, list[str]]]) -> str | None:
    if hierarchy == "0":
        points = [point for point, kind, _ in mounts if kind == "cgroup2"]
        return "/sys/fs/cgroup" if "/sys/fs/cgroup" in points else (points[0] if points else None)
    wanted = set(controllers.split(","))
    for point, kind, opts in mounts:
        if kind == "cgroup" and wanted <= set(opts):
            return point
    return None


def join_cgroups(client_cgroup: str) -> str | None:
    """Move this process into the cgroup the client is in, in every hierarchy; None, or why not."""
    own = {line.split(":", 2)[0]: line for line in (_read("/proc/self/cgroup") or "").splitlines()}
    mounts = None
    for line in client_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or own.get(parts[0]) == line:
            continue
        mounts = mounts if mounts is not None else _mounts()
        point = _mountpoint(parts[0], parts[1], mounts)
        if point is None:
            return f"no mount for cgroup hierarchy {parts[0]} ({parts[1] or 'v2'})"
        target = os.path.join(point, parts[2].lstrip("/"), "cgroup.procs")
        try:
            with open(target, "w") as fh:
                fh.write(str(os.getpid()))
        except OSError as exc:
            return f"cannot join the client's cgroup {target}: {exc.strerror or exc}"
    now = {line.split(":", 2)[0]: line for line in (_read("/proc/self/cgroup") or "").splitlines()}
    for line in client_cgroup.splitlines():
        if line and now.get(line.split(":", 2)[0]) != line:
            return f"still outside the client's cgroup ({line})"
    return None
