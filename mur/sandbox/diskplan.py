"""The disk ceiling (``capabilities.resources.workdir_max_bytes``) as data: which mechanism counts
the tools' bytes on this host, and its sizes. Pure; ``mur.sandbox.disk`` applies it.

Mechanisms, strongest first:

* ``ext4-loop`` (mur as root, a loop device and mkfs.ext4): the tools' workdir is a fresh ext4
  filesystem in a sparse image file of the declared size, mounted in the session's mount
  namespace only. Its own block and inode accounting is the ceiling: data, preallocation
  (``fallocate``), directories, symlink targets, extended-attribute blocks and files with no name
  left (``O_TMPFILE``, unlinked while open) all take its blocks; a write past it fails with ENOSPC
  in the tool. Disk-backed: the bytes are on the host's disk, not in memory.
* ``tmpfs`` (a mount namespace: root, or an unprivileged user namespace): a tmpfs with ``size=`` and
  ``nr_inodes=``, the same accounting in RAM (its pages are charged to the memory cgroup of the
  process that writes them: the session's, for a tool). Chosen only for ceilings up to a quarter of
  the session's memory bound and of the host's memory, so the workdir cannot take the memory the
  tools need.
* ``watcher`` (no mount namespace, or a ceiling too big for RAM without a loop device): the tools
  write the host directory, and a watcher thread sums ``st_blocks`` of every inode beneath it (and
  of files the tools hold open with no name) at a fixed interval, iteratively, at any depth; the
  session ends with E-RUN-013 once the sum passes the ceiling. A write is not refused as it
  happens: a fast writer gets up to one interval's worth past the ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass

MECHANISMS = {
    "ext4-loop": "a per-session ext4 filesystem on a loop device, sized to the ceiling (kernel-counted, on disk)",
    "tmpfs": "a per-session tmpfs with size= and nr_inodes= (kernel-counted, in RAM)",
    "watcher": "a watcher summing st_blocks of every inode at a fixed interval (after the fact, not kernel-counted)",
}
INODE_RATIO = 8192  # bytes of ceiling per inode: the inode limit of a kernel-counted workdir
MIN_INODES, MAX_INODES = 4096, 1 << 23
TMPFS_SHARE = 4  # a RAM workdir may take at most 1/4 of the session's memory bound and of the host's RAM
POLL_SECONDS = 0.25  # the fixed interval of the usage check (internal, not a manifest key: spec)
EXT4_INODE_SIZE = 256
MKFS_PATH = "/usr/sbin:/sbin:/usr/bin:/bin"  # where mkfs.ext4 is looked for (never the caller's PATH)
# Room on a session disk past the ceiling for the runtime's own few files in the workdir (MURMUR.md,
# task.md, .capsule-home): a workdir brought back at its ceiling still starts a session.
RUNTIME_HEADROOM = 1 << 20


@dataclass(frozen=True)
class DiskFacts:
    """What the host offers for a disk ceiling (measured: the probe, /proc/meminfo)."""

    mount_ns: bool  # the tools run in a root of the session's own (its mount namespace): a disk can be mounted there
    loop: bool  # a loop-mounted ext4 image was made and mounted by the probe (root)
    tmpfs: bool  # a tmpfs could be mounted in such a namespace
    memory_total: int  # the host's RAM in bytes (0: unknown)
    memory_bound: int  # the session's aggregate memory bound (cgroup_memory_bytes)
    why_not: str | None = None  # the probe's reason when neither loop nor tmpfs is available
    no_mount_ns: str | None = None  # why there is no such root (the view's reason)


@dataclass(frozen=True)
class DiskPlan:
    mechanism: str  # a MECHANISMS key
    limit: int  # workdir_max_bytes: what the tools (and the runtime's logs) may use
    inodes: int  # the inode ceiling
    image_bytes: int = 0  # ext4-loop: the sparse image's size (the limit plus room for metadata)
    exec_: bool = False  # filesystem.workdir_exec: the mount keeps exec
    reason: str | None = None  # why the ceiling is not kernel-counted (watcher), else None
    interval: float = POLL_SECONDS

    @property
    def kernel(self) -> bool:
        return self.mechanism != "watcher"

    @property
    def capacity(self) -> int:
        """What the disk holds: the ceiling and the runtime's headroom."""
        return self.limit + RUNTIME_HEADROOM

    @property
    def description(self) -> str:
        return MECHANISMS[self.mechanism]


def inode_limit(limit: int) -> int:
    return max(MIN_INODES, min(MAX_INODES, limit // INODE_RATIO))


def image_size(limit: int, inodes: int) -> int:
    """A sparse image that leaves at least ``limit`` (and the headroom) free once formatted: the
    inode tables, ext4's reserved clusters (2%, at most 4096 blocks), group descriptors and bitmaps,
    and slack. The runtime trims what is left over with a preallocated file outside the tools' view."""
    return limit + RUNTIME_HEADROOM + inodes * EXT4_INODE_SIZE + limit // 40 + (24 << 20)


def tmpfs_cap(facts: DiskFacts) -> int:
    """The largest ceiling a RAM-backed workdir may have here."""
    known = [m for m in (facts.memory_total, facts.memory_bound) if m > 0]
    return min(known) // TMPFS_SHARE if known else 0


def plan_disk(limit: int, facts: DiskFacts, *, root: bool, workdir_exec: bool = False) -> DiskPlan:
    """The strongest mechanism this host offers for ``limit`` bytes."""
    inodes = inode_limit(limit)
    if not facts.mount_ns:
        why = facts.no_mount_ns or "the session has no mount namespace of its own"
        return DiskPlan("watcher", limit, inodes, exec_=workdir_exec,
                        reason=f"no filesystem of the session's own can be mounted for the tools: {why}")
    if root and facts.loop:
        return DiskPlan("ext4-loop", limit, inodes, image_size(limit, inodes), exec_=workdir_exec)
    cap = tmpfs_cap(facts)
    if facts.tmpfs and limit <= cap:
        return DiskPlan("tmpfs", limit, inodes, exec_=workdir_exec)
    if not facts.tmpfs:
        why = facts.why_not or "no loop device and no tmpfs could be mounted here"
    else:
        loop = "no loop-mounted ext4 (mur is not root)" if not root else \
            f"no loop-mounted ext4 ({facts.why_not or 'no loop device or mkfs.ext4 here'})"
        why = (f"{loop}, and the ceiling ({limit} bytes) is above what a RAM-backed workdir may take here "
               f"({cap} bytes: a quarter of the session's memory bound and of the host's memory)")
    return DiskPlan("watcher", limit, inodes, exec_=workdir_exec, reason=why)
