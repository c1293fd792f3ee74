"""The tools' tree between the host workdir and the session disk (mur.sandbox.disk).

``copy_in`` fills the disk from the host workdir before any tool runs; ``copy_out`` brings what the
tools left back at session end, so the files a user keeps are where docs/run.md says. Both walk
iteratively (mur.fswalk: any depth, a bounded number of fds), never follow a link, and open every
file without following one and check it is the entry listed.

What crosses, and what does not:
* directories, regular files (holes stay holes: only data extents are copied) and symbolic links
  (as links: their target text, never what they point to), with mode and modification time;
* never a file with more than one link on the host (another name may be outside the workdir:
  copying it in would hand a tool what that name holds), nor fifos, sockets or devices;
* setuid and setgid bits are dropped both ways; extended attributes and ACLs are not copied;
* copy-out writes a file only when the tools changed it (kind, size, mtime, mode or link target
  differ from what copy-in put there), by a fresh temp file renamed over the name; a name copy-in
  did not bring is written only where the host has nothing (a hard link or a fifo left on the host
  stays); what the tools removed is removed on the host only where the host entry is still what
  copy-in saw (another session or the user may have changed it since); the bytes written are capped
  (a thousand hard links to one file on the disk do not become a thousand copies on the host).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from typing import Iterator

from mur import fswalk

FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
PERM = 0o1777  # what crosses of a mode: permission bits and sticky, never setuid/setgid
FULL = (errno.ENOSPC, errno.EDQUOT)
CHUNK = 1 << 20


class DiskFull(OSError):
    """The disk's own ceiling refused a write (ENOSPC / EDQUOT)."""


Sig = tuple  # (kind, size, mtime_ns, perm, link target)


@dataclass
class Snapshot:
    """What copy_in put on the disk, by path relative to the workdir ("a/b"), with its signature."""

    entries: dict[str, Sig] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, rel: str, sig: Sig) -> None:
        self.entries[rel] = sig
        parent, _, name = rel.rpartition("/")
        self.children.setdefault(parent, []).append(name)


@dataclass
class Report:
    copied: int = 0
    removed: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # what was left out, and why (first few)
    skipped_count: int = 0

    def skip(self, rel: str, why: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < 20:
            self.skipped.append(f"{rel}: {why}")


def signature(st: os.stat_result, target: str | None = None) -> Sig:
    kind = "d" if stat.S_ISDIR(st.st_mode) else "l" if stat.S_ISLNK(st.st_mode) else "f"
    size = 0 if kind == "d" else st.st_size
    mtime = 0 if kind == "d" else st.st_mtime_ns  # a directory's mtime moves with every entry made in it
    return (kind, size, mtime, stat.S_IMODE(st.st_mode) & PERM if kind != "l" else 0, target)


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


# --- the two directory stacks ------------------------------------------------------------------


class _Mirror:
    """The destination directories matching the source walk's current path (fds, closed on the way up)."""

    def __init__(self, root_fd: int) -> None:
        self.fds = [root_fd]
        self.rels = [""]

    @property
    def top(self) -> int:
        return self.fds[-1]

    @property
    def rel(self) -> str:
        return self.rels[-1]

    def push(self, fd: int, name: str) -> None:
        self.fds.append(fd)
        self.rels.append(_join(self.rels[-1], name))

    def pop(self) -> None:
        fd = self.fds.pop()
        self.rels.pop()
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        while len(self.fds) > 1:
            self.pop()


def _walk_pairs(walker: fswalk.Walker, mirror: _Mirror) -> Iterator[fswalk.Step]:
    """The source walk, with ``mirror`` popped on every "leave" after the caller saw it."""
    for step in walker:
        yield step
        if step.kind == "leave":
            mirror.pop()


# --- copying one entry ---------------------------------------------------------------------------


def _open_listed(dirfd: int, name: str, listed: os.stat_result) -> int | None:
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dirfd)
    except OSError:
        return None
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != (listed.st_dev, listed.st_ino) or not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd


def _copy_data(src: int, dst: int, size: int) -> int:
    """Data extents of ``src`` into ``dst`` (holes stay holes); returns the bytes copied."""
    copied = 0
    offset = 0
    seeks = True
    while offset < size:
        start, end = offset, size
        if seeks:
            try:
                start = os.lseek(src, offset, os.SEEK_DATA)
                end = os.lseek(src, start, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # only a hole is left
                seeks, start, end = False, offset, size  # no SEEK_DATA here: copy everything
        end = min(end, size)
        if start >= end:
            break
        os.lseek(dst, start, os.SEEK_SET)
        position = start
        while position < end:
            sent = os.sendfile(dst, src, position, min(CHUNK, end - position))
            if sent == 0:
                break  # the file shrank under us
            position += sent
        copied += position - start
        if position < end:
            break
        offset = end
    os.ftruncate(dst, size)
    return copied


def _finish(fd: int, st: os.stat_result, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        os.fchown(fd, *owner)
    os.fchmod(fd, stat.S_IMODE(st.st_mode) & PERM)
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def _temp_name(name: str) -> str:
    return f".{name[:40]}.mur-{os.urandom(6).hex()}.tmp"


def _write_file(src_dir: int, name: str, st: os.stat_result, dst_dir: int, dst_name: str,
                owner: tuple[int, int] | None) -> int | None:
    """A copy of the listed regular file as ``dst_name`` (created O_EXCL); bytes copied, None if it moved."""
    src = _open_listed(src_dir, name, st)
    if src is None:
        return None
    try:
        dst = os.open(dst_name, NEW_FILE, 0o600, dir_fd=dst_dir)
        try:
            copied = _copy_data(src, dst, st.st_size)
            _finish(dst, st, owner)
        except BaseException:
            os.close(dst)
            try:
                os.unlink(dst_name, dir_fd=dst_dir)
            except OSError:
                pass
            raise
        os.close(dst)
        return copied
    finally:
        os.close(src)


def _make_link(target: str, dst_dir: int, dst_name: str, st: os.stat_result, owner: tuple[int, int] | None) -> None:
    os.symlink(target, dst_name, dir_fd=dst_dir)
    if owner is not None:
        os.chown(dst_name, *owner, dir_fd=dst_dir, follow_symlinks=False)
    try:
        os.utime(dst_name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_dir, follow_symlinks=False)
    except OSError:
        pass


def _open_dir(dirfd: int, name: str) -> int:
    return os.open(name, fswalk.DIR_FLAGS, dir_fd=dirfd)


def _full(exc: OSError) -> bool:
    return exc.errno in FULL


# --- copy in -------------------------------------------------------------------------------------


def copy_in(src_fd: int, dst_fd: int, *, owner: tuple[int, int] | None = None,
            deadline: float | None = None, leave: tuple[str, ...] = ()) -> Snapshot:
    """Fill the (empty) disk directory ``dst_fd`` from the host workdir ``src_fd``; raises DiskFull
    when the disk's ceiling refuses it. ``owner``: (uid, gid) for everything made (root only);
    ``leave``: top-level names that stay on the host (copy_out leaves them too)."""
    snap = Snapshot()
    mirror = _Mirror(dst_fd)
    walker = fswalk.Walker(src_fd, deadline=deadline)
    try:
        for step in _walk_pairs(walker, mirror):
            rel = _join(mirror.rel, step.name)
            st = step.st
            if not mirror.rel and step.name in leave:
                if step.kind == "enter":
                    walker.skip()
                    mirror.push(-1, step.name)
                continue
            try:
                if step.kind == "enter":
                    os.mkdir(step.name, 0o700, dir_fd=mirror.top)
                    mirror.push(_open_dir(mirror.top, step.name), step.name)
                    snap.add(rel, signature(st))
                elif step.kind == "leave":
                    if mirror.top >= 0:
                        _finish(mirror.top, st, owner)
                elif stat.S_ISLNK(st.st_mode):
                    target = os.readlink(step.name, dir_fd=step.dirfd)
                    _make_link(target, mirror.top, step.name, st, owner)
                    snap.add(rel, signature(st, target))
                elif not stat.S_ISREG(st.st_mode):
                    snap.notes.append(f"{rel}: not a regular file, directory or link: left on the host")
                elif st.st_nlink > 1:
                    snap.notes.append(f"{rel}: has {st.st_nlink} names (a hard link): left on the host")
                elif _write_file(step.dirfd, step.name, st, mirror.top, step.name, owner) is not None:
                    snap.add(rel, signature(st))
            except OSError as exc:
                if _full(exc):
                    raise DiskFull(exc.errno, "the workdir does not fit under its ceiling", rel) from None
                if step.kind == "enter":
                    walker.skip()
                    mirror.push(-1, step.name)
                snap.notes.append(f"{rel}: not copied ({exc.strerror or exc})")
    finally:
        mirror.close()
    if owner is not None:
        os.fchown(dst_fd, *owner)
    return snap


# --- copy out ------------------------------------------------------------------------------------


def _host_sig(dirfd: int, name: str) -> Sig | None:
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except OSError:
        return None
    target = os.readlink(name, dir_fd=dirfd) if stat.S_ISLNK(st.st_mode) else None
    return signature(st, target)


def _owner_of(dirfd: int, name: str, default: tuple[int, int] | None) -> tuple[int, int] | None:
    if default is None:
        return None
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        return st.st_uid, st.st_gid
    except OSError:
        return default


def _replace(dirfd: int, temp: str, name: str, rel: str, snap: Snapshot) -> None:
    """rename(temp, name); a directory in the way goes first when it is still what copy-in saw."""
    try:
        os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        return
    except OSError as exc:
        if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            _drop(dirfd, temp)
            raise
    if snap.entries.get(rel, ("?",))[0] != "d":
        _drop(dirfd, temp)
        raise OSError(errno.EEXIST, "the host has a directory there that copy-in never saw", rel)
    fswalk.remove_entry(dirfd, name)
    os.rename(temp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)


def _drop(dirfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dirfd)
    except OSError:
        pass


def copy_out(src_fd: int, dst_fd: int, snap: Snapshot, *, new_owner: tuple[int, int] | None = None,
             budget: int | None = None, deadline: float | None = None, leave: tuple[str, ...] = ()) -> Report:
    """Bring the disk directory ``src_fd`` back into the host workdir ``dst_fd`` (see the module
    docstring). ``new_owner``: (uid, gid) for entries new on the host (root only; a replaced entry
    keeps its host owner); ``budget``: at most this many data bytes are written."""
    report = Report()
    mirror = _Mirror(dst_fd)
    walker = fswalk.Walker(src_fd, deadline=deadline)
    seen: dict[str, set[str]] = {"": set()}
    try:
        for step in walker:
            parent_rel = mirror.rel
            rel = _join(parent_rel, step.name)
            st = step.st
            if not parent_rel and step.name in leave and step.kind != "leave":
                if step.kind == "enter":
                    walker.skip()
                    mirror.push(-1, step.name)
                    seen[rel] = set()
                seen[""].add(step.name)
                continue
            if step.kind == "leave":
                _leave_dir(mirror, step, seen.pop(mirror.rel, set()), snap, new_owner, report)
                mirror.pop()
                continue
            seen.setdefault(parent_rel, set()).add(step.name)
            try:
                if step.kind == "enter":
                    fd = _enter_dir(mirror.top, step.name, rel, snap)
                    if fd < 0:
                        walker.skip()
                        report.skip(rel, "the host has something else there that copy-in never saw")
                    mirror.push(fd, step.name)
                    seen[rel] = set()
                    continue
                if mirror.top < 0:
                    continue
                target = os.readlink(step.name, dir_fd=step.dirfd) if stat.S_ISLNK(st.st_mode) else None
                sig = signature(st, target)
                if snap.entries.get(rel) == sig:
                    continue  # as copy-in left it
                if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                    report.skip(rel, "not a regular file, directory or link")
                    continue
                if budget is not None and report.bytes + st.st_size > budget and stat.S_ISREG(st.st_mode):
                    report.skip(rel, "over the copy-out budget (the workdir ceiling)")
                    continue
                if rel not in snap.entries and _host_sig(mirror.top, step.name) is not None:
                    report.skip(rel, "the host has an entry there that copy-in did not bring (not ours to replace)")
                    continue
                owner = _owner_of(mirror.top, step.name, new_owner) if rel in snap.entries else new_owner
                temp = _temp_name(step.name)
                if target is not None:
                    _make_link(target, mirror.top, temp, st, owner)
                else:
                    copied = _write_file(step.dirfd, step.name, st, mirror.top, temp, owner)
                    if copied is None:
                        continue
                    report.bytes += copied
                _replace(mirror.top, temp, step.name, rel, snap)
                report.copied += 1
            except (fswalk.Raced, fswalk.WalkTimeout):
                raise
            except OSError as exc:
                report.skip(rel, exc.strerror or str(exc))
        _remove_gone(mirror.top, "", seen.get("", set()), snap, report)
    finally:
        mirror.close()
    return report


def _enter_dir(dirfd: int, name: str, rel: str, snap: Snapshot) -> int:
    """The host directory for ``rel`` (made when missing; an entry copy-in saw there replaced); -1: leave it."""
    if dirfd < 0:
        return -1
    try:
        os.mkdir(name, 0o700, dir_fd=dirfd)
    except FileExistsError:
        pass
    try:
        return _open_dir(dirfd, name)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
    if snap.entries.get(rel) is None or snap.entries[rel][0] == "d" or _host_sig(dirfd, name) != snap.entries[rel]:
        return -1  # not what copy-in saw: someone else's; left alone
    os.unlink(name, dir_fd=dirfd)
    os.mkdir(name, 0o700, dir_fd=dirfd)
    return _open_dir(dirfd, name)


def _leave_dir(mirror: _Mirror, step: fswalk.Step, names: set[str], snap: Snapshot,
               new_owner: tuple[int, int] | None, report: Report) -> None:
    fd = mirror.top
    if fd < 0:
        return
    rel = mirror.rel
    _remove_gone(fd, rel, names, snap, report)
    try:
        if rel not in snap.entries and new_owner is not None:
            os.fchown(fd, *new_owner)
        os.fchmod(fd, stat.S_IMODE(step.st.st_mode) & PERM)
        os.utime(fd, ns=(step.st.st_atime_ns, step.st.st_mtime_ns))
    except OSError as exc:
        report.skip(rel, exc.strerror or str(exc))


def _remove_gone(dirfd: int, rel: str, present: set[str], snap: Snapshot, report: Report) -> None:
    """Entries copy-in put under ``rel`` that the tools removed: removed on the host where unchanged."""
    for name in snap.children.get(rel, ()):
        if name in present:
            continue
        child = _join(rel, name)
        base = snap.entries.get(child)
        now = _host_sig(dirfd, name)
        if base is None or now is None or now != base:
            continue  # gone already, or changed on the host since: not ours to remove
        try:
            if base[0] == "d":
                if _unchanged_tree(dirfd, name, child, snap):
                    fswalk.remove_entry(dirfd, name)
                else:
                    continue
            else:
                os.unlink(name, dir_fd=dirfd)
            report.removed += 1
        except OSError as exc:
            report.skip(child, f"not removed: {exc.strerror or exc}")


def _unchanged_tree(dirfd: int, name: str, rel: str, snap: Snapshot) -> bool:
    """Does the host directory still hold only what copy-in saw (nothing new, nothing changed)?"""
    try:
        fd = _open_dir(dirfd, name)
    except OSError:
        return False
    prefix = [rel]
    try:
        for step in fswalk.walk(fd):
            if step.kind == "leave":
                prefix.pop()
                continue
            child = _join(prefix[-1], step.name)
            target = os.readlink(step.name, dir_fd=step.dirfd) if stat.S_ISLNK(step.st.st_mode) else None
            if snap.entries.get(child) != signature(step.st, target):
                return False
            if step.kind == "enter":
                prefix.append(child)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
