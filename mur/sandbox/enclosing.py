"""The cgroup mur already runs in, as the aggregate bound, where it cannot create one of its own.

A hardened container or Kubernetes pod (non-root, every capability dropped, the cgroup filesystem
mounted read-only) lets no process create a cgroup, so ``cgroups.create_session_cgroup`` fails
there. The container's own cgroup still bounds everything in it, mur and its tools together, and
no process inside can leave it or raise its limits. When that bound is at or below the manifest's
(``memory.max`` / ``memory.limit_in_bytes`` <= ``cgroup_memory_bytes``, ``pids.max`` <=
``cgroup_pids_max``), it is the aggregate bound the spec asks for (E-RUN-012 otherwise).

* **Found from kernel state only**: ``/proc/self/cgroup`` (the cgroup path per hierarchy) and
  ``/proc/self/mountinfo`` (which part of each hierarchy is mounted where: a container sees its own
  cgroup as the mount's root). The bound is the smallest limit on the path from our cgroup up to
  the mounted root; ancestors above it are invisible, so never counted.
* **Cannot leave or raise**: the cgroup mount is read-only, or (not root) no limit file and no
  ``cgroup.procs`` on that path is writable by this uid. Tools have at most mur's rights there (and
  Landlock grants them no ``/sys`` at all).
* **pids**: a pod cannot carry a ``pids`` limit (Kubernetes has no per-pod field; the kubelet's
  ``podPidsLimit`` sits on an ancestor the container cannot see). Without a ``pids.max`` on the path
  the bound on the tool tree's tasks is the tools' hard RLIMIT_NPROC, which no tool can raise and
  the kernel checks against every task of the uid (a session uid of its own as root: exactly the
  session's tasks); ``policy.build_policy`` then caps its headroom at ``cgroup_pids_max``.
* **Evidence**: the enclosing cgroup's own counters (``memory.events`` / ``memory.oom_control``
  ``oom_kill``, ``pids.events`` ``max``) still attribute a kill to ``cgroup_memory_bytes`` /
  ``cgroup_pids_max``: runs are serialized and tools are the OOM killer's first choice
  (``oom_score_adj`` 1000, set by the session's spawner and inherited by each tool).

Pure parsing functions take the file texts; ``find_enclosing`` reads them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from mur.digits import is_digits

UNLIMITED_V1 = 1 << 62  # memory.limit_in_bytes reads 9223372036854771712 (PAGE_COUNTER_MAX pages) when unset
E012_HINT = ("the systemd user unit `mur` runs under needs `Delegate=yes` for memory, pids, cpu and io; or run mur in "
             "a cgroup it cannot change whose memory limit (and pids.max, if set) is at or below "
             "capabilities.resources.cgroup_memory_bytes (cgroup_pids_max): a container's memory limit")


@dataclass(frozen=True)
class Mount:
    root: str  # the path inside the hierarchy that is mounted (a container's own cgroup, or "/")
    mountpoint: str
    fstype: str  # "cgroup" (v1) or "cgroup2"
    controllers: frozenset[str]  # v1: the controllers of this hierarchy
    readonly: bool


@dataclass(frozen=True)
class EnclosingBound:
    """The limits on the cgroup this process is in, and where its counters are."""

    version: int
    memory_dir: str  # where the smallest memory limit is
    memory_bytes: int
    oom_dir: str  # our own memory cgroup: v1 counts an OOM kill only in the victim's (v2 counts it upwards)
    pids_dir: str | None  # where pids.max is (the cgroup whose pids.events counts a refused fork); None: none
    pids_max: int | None
    readonly: bool  # the cgroup filesystem is mounted read-only (else: not writable by this uid)

    def describe(self) -> str:
        pids = f"pids.max {self.pids_max}" if self.pids_max is not None else "no pids.max (RLIMIT_NPROC bounds tasks)"
        how = "mounted read-only" if self.readonly else "not writable by this uid"
        return f"cgroup v{self.version} {self.memory_dir}: memory {self.memory_bytes} bytes, {pids}; {how}"

    def shortfall(self, memory_bytes: int, pids_max: int) -> str | None:
        """Why this bound is not at or below the manifest's, or None when it is."""
        if self.memory_bytes > memory_bytes:
            return (f"the cgroup mur runs in ({self.memory_dir}) bounds memory at {self.memory_bytes} bytes, above "
                    f"capabilities.resources.cgroup_memory_bytes ({memory_bytes})")
        if self.pids_max is not None and self.pids_max > pids_max:
            return (f"the cgroup mur runs in ({self.pids_dir}) bounds tasks at {self.pids_max}, above "
                    f"capabilities.resources.cgroup_pids_max ({pids_max})")
        return None


def unmet(bound: EnclosingBound | dict | None, memory_bytes: int, pids_max: int) -> str | None:
    """Why no enclosing bound stands in for a session cgroup (E-RUN-012's reason), None when one does."""
    if bound is None:
        return "and the cgroup mur runs in has no memory limit it could not change"
    if isinstance(bound, dict):  # the probe's JSON form
        bound = EnclosingBound(**bound)
    return bound.shortfall(memory_bytes, pids_max)


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup mounts of a /proc/self/mountinfo text."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 6 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(fields[5].split(",")) | set(tail[2].split(","))
        controllers = frozenset(o for o in tail[2].split(",") if o in ("memory", "pids")) if tail[0] == "cgroup" \
            else frozenset()
        out.append(Mount(_unescape(fields[3]), _unescape(fields[4]), tail[0], controllers, "ro" in options))
    return out


def _unescape(text: str) -> str:
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Controller ("memory", "pids") or "" (the v2 hierarchy) -> this process's cgroup path."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            out[name] = parts[2].strip() or "/"
    return out


def own_dir(mount: Mount, path: str) -> str | None:
    """Where this process's cgroup ``path`` appears under ``mount`` (None: not under its root)."""
    root = mount.root.rstrip("/")
    if root and path != root and not path.startswith(root + "/"):
        return None
    rest = path[len(root):].lstrip("/")
    return os.path.join(mount.mountpoint, rest) if rest else mount.mountpoint


def _limit(read: Callable[[str], str | None], path: str) -> int | None:
    text = read(path)
    if text is None:
        return None
    text = text.strip()
    if not text or text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED_V1 else value


def smallest_limit(read: Callable[[str], str | None], start: str, stop: str, name: str) -> tuple[int, str] | None:
    """(smallest ``name`` on the path start .. stop, the directory holding it), None when unlimited."""
    best: tuple[int, str] | None = None
    d = start
    while True:
        value = _limit(read, os.path.join(d, name))
        if value is not None and (best is None or value < best[0]):
            best = (value, d)
        if d == stop or len(d) <= len(stop):
            return best
        d = os.path.dirname(d)


def _path_dirs(start: str, stop: str) -> list[str]:
    out, d = [start], start
    while d != stop and len(d) > len(stop):
        d = os.path.dirname(d)
        out.append(d)
    return out


def find_in(mounts: list[Mount], own: dict[str, str], *, read: Callable[[str], str | None],
            writable: Callable[[str], bool], is_root: bool) -> EnclosingBound | None:
    """The enclosing bound from parsed kernel state (None: no memory limit we could not change)."""
    found: dict[str, tuple[int, Mount, str, int | None, str | None]] = {}
    for ctrl, v1_name, v2_name in (("memory", "memory.limit_in_bytes", "memory.max"), ("pids", "pids.max", "pids.max")):
        v1 = [m for m in mounts if m.fstype == "cgroup" and ctrl in m.controllers]
        v2 = [m for m in mounts if m.fstype == "cgroup2"]
        for version, candidates, key, name in ((1, v1, ctrl, v1_name), (2, v2, "", v2_name)):
            if ctrl in found or key not in own:
                continue
            for mount in candidates:
                start = own_dir(mount, own[key])
                if start is None or read(os.path.join(start, "cgroup.procs")) is None:
                    continue
                limit = smallest_limit(read, start, mount.mountpoint, name)
                found[ctrl] = (version, mount, start, limit[0] if limit else None, limit[1] if limit else None)
                break
    memory = found.get("memory")
    if memory is None or memory[3] is None:
        return None
    version, mount, start, memory_bytes, memory_dir = memory
    pids = found.get("pids")
    pids_max, pids_dir = (pids[3], pids[4]) if pids is not None and pids[3] is not None else (None, None)
    used = [(memory[1], memory[2])] + ([(pids[1], pids[2])] if pids is not None else [])
    readonly = all(m.readonly for m, _ in used)
    if not readonly:
        if is_root:
            return None  # root can write a read-write cgroupfs: then mur makes its own cgroup, or nothing holds
        for m, d in used:
            for directory in _path_dirs(d, m.mountpoint):
                names = ("cgroup.procs", "memory.max", "memory.limit_in_bytes", "pids.max")
                if any(writable(os.path.join(directory, n)) for n in names):
                    return None
    assert memory_bytes is not None and memory_dir is not None
    return EnclosingBound(version, memory_dir, memory_bytes, start, pids_dir, pids_max, readonly)


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def find_enclosing() -> EnclosingBound | None:
    """The cgroup this process runs in, as an aggregate bound, if it has a memory limit it cannot change."""
    mountinfo, own = _read("/proc/self/mountinfo"), _read("/proc/self/cgroup")
    if mountinfo is None or own is None:
        return None
    return find_in(parse_mountinfo(mountinfo), parse_proc_cgroup(own), read=_read,
                   writable=lambda p: os.path.exists(p) and os.access(p, os.W_OK), is_root=os.geteuid() == 0)


def evidence(bound: EnclosingBound, read: Callable[[str], str | None] = _read) -> tuple[int, int]:
    """(oom kills, pids.max hits) so far in the enclosing cgroup (its own counters)."""
    def key(path: str, name: str) -> int:
        for line in (read(path) or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == name and is_digits(parts[1]):
                return int(parts[1])
        return 0

    events = "memory.events" if bound.version == 2 else "memory.oom_control"
    oom = key(os.path.join(bound.oom_dir, events), "oom_kill")
    hits = key(os.path.join(bound.pids_dir, "pids.events"), "max") if bound.pids_dir else 0
    return oom, hits


class EnclosingCgroup:
    """``cgroups.SessionCgroup``'s interface over an enclosing bound: nothing to join or remove (the
    tools are in it already); the session's processes are listed and killed by ``find`` / ``kill``
    (mur.sandbox.tree: mur's descendants carrying the session's seccomp programs)."""

    version = 0
    dirs: dict[str, str] = {}
    procs_files: list[str] = []

    def __init__(self, bound: EnclosingBound, find: Callable[[], set[int]], kill: Callable[[float], object]):
        self.bound = bound
        self.version = bound.version
        self.dirs = {}
        self.procs_files = []
        self.notes: list[str] = []
        self._find, self._kill = find, kill

    def evidence(self) -> tuple[int, int]:
        return evidence(self.bound)

    def pids(self) -> set[int]:
        return self._find()

    def kill_all(self, timeout: float = 5.0) -> None:
        self._kill(timeout)

    def remove(self) -> None:
        self.kill_all()
