"""The applier of ``viewplan.ViewPlan`` and ``diskplan.DiskPlan``: runs inside the session's
namespace holder (namespaces.py), after ``unshare``, and builds the tools' root the way bubblewrap
does. Single-threaded, stdlib only (ctypes), raises OSError naming the step.

  1. every mount becomes private; a scratch tmpfs is mounted over an existing directory (/tmp)
     and becomes the root (``pivot_root``): the host's tree is now under ``/oldroot``, reachable
     only here, never from the new root;
  2. the session disk is mounted at ``/disk`` (a loop-attached ext4 image, or a tmpfs), with the
     tools' ``work/`` and ``tmp/`` directories (``disk.py`` does the mounting);
  3. the new root (another tmpfs at ``/newroot``) gets the plan's steps in order: directories,
     symbolic links, read-only binds of host paths (from ``/oldroot``), the workdir and ``/tmp``
     binds from the disk, read-only skeletons, the ``/proc`` mount point;
  4. the pid namespace's init mounts ``/proc`` there (it must be inside the pid namespace, and the
     host's procfs must still be visible for an unprivileged mount of it), then ``finish`` makes
     the new root the root (``pivot_root(".", ".")`` + detach the old one) and read-only.

A bind inside a user namespace keeps the flags the host locked on its mount (read-only, nosuid,
nodev, noexec, atime): a remount must repeat them, so they are read from statvfs first.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from mur.sandbox.viewplan import Mount, ViewPlan

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 16384, 1 << 18)
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2
ST_TO_MS = ((1, MS_RDONLY), (2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC), (1024, MS_NOATIME),
            (2048, MS_NODIRATIME), (4096, MS_RELATIME))
SCRATCH_CANDIDATES = ("/tmp", "/mnt", "/var/tmp", "/run", "/media", "/srv", "/opt", "/home")
OLD, NEW, DISK = "/oldroot", "/newroot", "/disk"
SKELETON_OPTIONS = b"size=64k,nr_inodes=4096,mode=0755"
ROOT_OPTIONS = b"size=1m,nr_inodes=65536,mode=0755"
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: bytes | None = None) -> None:
    _check(_libc.mount(os.fsencode(source) if source else None, os.fsencode(target),
                       fstype.encode() if fstype else None, flags, data), f"mount {source or fstype} on {target}")


def locked_flags(path: str) -> int:
    """The mount flags of ``path``'s mount that a bind remount must keep."""
    st = os.statvfs(path)
    return sum(ms for bit, ms in ST_TO_MS if st.f_flag & bit)


def bind(source: str, target: str, *, writable: bool = False, exec_: bool = False, dev: bool = False) -> None:
    """Bind ``source`` on ``target`` (which exists), then remount it with the view's flags."""
    mount(source, target, None, MS_BIND)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | locked_flags(target)
    flags |= 0 if writable else MS_RDONLY
    flags |= 0 if exec_ else MS_NOEXEC
    flags |= 0 if dev else MS_NODEV
    mount(None, target, None, flags)


def _scratch() -> str:
    for path in SCRATCH_CANDIDATES:
        if os.path.isdir(path) and not os.path.islink(path):
            return path
    raise OSError(2, "no directory to build the session's root on (/tmp, /mnt, ... are all missing)")


def enter_scratch() -> None:
    """Steps 1: a private tree, a scratch tmpfs as the root, the host's under /oldroot."""
    _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount(/, MS_PRIVATE)")
    base = _scratch()
    mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, b"size=64k,nr_inodes=64,mode=0700")
    for name in (OLD, NEW, DISK):
        os.mkdir(base + name, 0o700)
    os.chdir(base)
    _check(_libc.pivot_root(os.fsencode(base), os.fsencode(base + OLD)), "pivot_root to the scratch root")
    os.chdir("/")
    mount("tmpfs", NEW, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_OPTIONS)


@dataclass
class Sources:
    """Where the workdir and /tmp binds come from: the disk's directories, or host paths."""

    work: str  # a path in the scratch root ("/disk/work", or "/oldroot<host workdir>")
    tmp: str | None


def build(plan: ViewPlan, sources: Sources) -> None:
    """Step 3: the plan's steps, in order, under /newroot."""
    for step in plan.steps:
        _apply(step, sources)


def _apply(step: Mount, sources: Sources) -> None:
    target = NEW + step.target
    what = f"{step.kind} {step.target}"
    try:
        if step.kind == "dir":
            os.makedirs(target, 0o755, exist_ok=True)
        elif step.kind == "link":
            os.symlink(step.source, target)
        elif step.kind in ("bind", "device"):
            _mountpoint(target, step.is_dir)
            bind(OLD + step.source, target, exec_=step.exec_, dev=step.kind == "device",
                 writable=step.kind == "device")
        elif step.kind == "work":
            _mountpoint(target, True)
            bind(sources.work, target, writable=True, exec_=step.exec_)
        elif step.kind == "staged":
            _mountpoint(target, True)
            bind(OLD + step.source, target, exec_=step.exec_)
        elif step.kind == "tmp":
            if sources.tmp is None:
                os.makedirs(target, 0o755, exist_ok=True)
                return
            _mountpoint(target, True)
            bind(sources.tmp, target, writable=True, exec_=step.exec_)
        elif step.kind == "skeleton":
            _mountpoint(target, True)
            mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, SKELETON_OPTIONS)
        elif step.kind == "proc":
            os.makedirs(target, 0o555, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"building the tools' root ({what}): {exc.strerror or exc}") from None


def _mountpoint(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, 0o755, exist_ok=True)
    elif not os.path.exists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))


def mount_proc() -> None:
    """Step 4, in the pid namespace's init: its procfs, only the process directories."""
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    try:
        mount("proc", NEW + "/proc", "proc", flags, b"subset=pid")
    except OSError:
        mount("proc", NEW + "/proc", "proc", flags)  # before Linux 5.8: no subset=


def finish(plan: ViewPlan) -> None:
    """Step 4: skeletons read-only, the new root becomes the root, the old one is detached."""
    for step in plan.steps:
        if step.kind == "skeleton":
            mount(None, NEW + step.target, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  SKELETON_OPTIONS)
    os.chdir(NEW)
    _check(_libc.pivot_root(b".", b"."), "pivot_root to the tools' root")
    _check(_libc.umount2(b".", MNT_DETACH), "detaching the host's tree")
    os.chdir("/")
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
