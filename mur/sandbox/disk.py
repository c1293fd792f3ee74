"""The session disk: the tools' workdir on a filesystem whose own accounting is the ceiling
(``diskplan.DiskPlan``), and the runtime's handle on it.

Three halves:
* ``make_image`` (mur, before the holder starts; ext4-loop only): a sparse image file of the
  planned size, formatted by ``mkfs.ext4`` (no journal, no reserved blocks, the inode limit) or
  copied from the image mkfs made for the same plan before (a template in the runtime's private
  cache), in a directory of the runtime's own (the session directory): never where a tool can reach it;
* ``mount_disk`` (inside the namespace holder, after ``rootfs.enter_scratch``): attaches the image
  to a free loop device (``LOOP_CONFIGURE`` with autoclear: it detaches when its last mount goes)
  and mounts it, or mounts a tmpfs with ``size=``/``nr_inodes=``; makes ``work/`` (the tools'
  workdir) and ``tmp/`` (their /tmp), and trims an ext4 disk's free space to exactly the ceiling
  with a preallocated file at its root, where no tool can see it;
* ``HeldDisk`` (mur): the disk's root and workdir held by fd (sent back by the holder), which stay
  usable after the namespace is gone: its usage from ``fstatvfs`` (what the kernel counts), and
  ``copy_in`` / ``copy_out`` (mur.sandbox.mirror) between it and the host workdir -- all but the
  runtime's staged ``tools/``, which stays on the host and is bound read-only into the view.

A mur killed with -9 takes the namespace (and a tmpfs disk's content) with it; an ext4 disk's image
stays in the session directory (``disk.img``, mountable read-only by hand) until ``mur gc``.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from mur.sandbox import mirror
from mur.sandbox.diskplan import MKFS_PATH, RUNTIME_HEADROOM, DiskPlan
from mur.sandbox.viewplan import STAGED

IMAGE_NAME = "disk.img"
RESERVE = ".mur-reserve"  # the ballast file at the disk's root (outside the tools' view)
WORK, TMP = "work", "tmp"
MKFS_TIMEOUT = 60.0
LOOP_CTL_GET_FREE, LOOP_CONFIGURE, LOOP_SET_FD, LOOP_SET_STATUS64, LOOP_CLR_FD = 0x4C82, 0x4C0A, 0x4C00, 0x4C04, 0x4C01
LO_FLAGS_AUTOCLEAR = 4
LOOP_INFO64_SIZE, LO_FLAGS_OFFSET = 232, 52
LOOP_TRIES = 64  # a burst of sessions (40 services after a reboot) races for the same free device
# A write the kernel refuses leaves some blocks free: a large folio (up to 2 MiB) is reserved whole or
# not at all, and ext4 keeps clusters back for its metadata. "Full" is less than this much left.
FULL_SLACK_MIN, FULL_SLACK_MAX, FULL_SLACK_SHARE = 2 << 20, 64 << 20, 50


class DiskError(OSError):
    """The disk could not be made (the caller falls back to the watcher, and says why)."""


# --- mur: the image -------------------------------------------------------------------------------


def mkfs_path() -> str | None:
    return shutil.which("mkfs.ext4", path=MKFS_PATH)


def make_image(plan: DiskPlan, directory: Path, *, template: bool = True) -> tuple[Path, int]:
    """A formatted sparse ext4 image in ``directory`` (made 0700); returns (path, an O_RDWR fd).

    A copy of the formatted template kept for this plan's sizes (``<cache>/disk/``: the data extents
    of a sparse file, ~0.2 ms) when one is there, else ``mkfs.ext4`` (a process: ~5 ms), whose
    result becomes the template for the next session. ``template=False`` (the kernel probe, which
    checks that mkfs works and makes a disk no session uses): mkfs, nothing kept."""
    mkfs = mkfs_path()
    if mkfs is None:
        raise DiskError(errno.ENOENT, "mkfs.ext4 is not installed (Debian: e2fsprogs)")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / IMAGE_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        key = _template_key(plan, mkfs)
        if not (template and _from_template(key, fd, plan.image_bytes)):
            os.close(fd)
            fd = -1
            _mkfs(mkfs, plan, path)
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            if template:
                _keep_template(key, fd, plan.image_bytes)
        return path, fd
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            path.unlink()
        except OSError:
            pass
        raise


def _mkfs(mkfs: str, plan: DiskPlan, path: Path) -> None:
    os.truncate(path, plan.image_bytes)
    # 4 KiB blocks whatever the size: a directory or a long link takes what it takes on the host
    # the runtime's headroom as ext4's reserved blocks: root's (mur's) only, never the tools'
    base = [mkfs, "-q", "-F", "-b", "4096", "-O", "^has_journal,^resize_inode", "-m", _reserved(plan), "-N",
            str(plan.inodes + 16)]
    done = None
    for extended in ("lazy_itable_init=1,assume_storage_prezeroed=1,nodiscard", "lazy_itable_init=1,nodiscard"):
        done = subprocess.run([*base, "-E", extended, str(path)], capture_output=True, text=True,
                              timeout=MKFS_TIMEOUT, env={"PATH": MKFS_PATH, "LANG": "C"})
        if done.returncode == 0:
            break
    if done is None or done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()[-300:] if done is not None else ""
        raise DiskError(errno.EIO, f"mkfs.ext4 failed: {detail}")


def _reserved(plan: DiskPlan) -> str:
    return f"{100 * RUNTIME_HEADROOM / plan.image_bytes:.4f}"


# --- the template: a formatted image kept per plan ---------------------------------------------
# Mounting an image is the kernel parsing it as root: the template is trusted only in a directory
# of the runtime's own that nobody else can write, as a file of its own (mur.privatecache), and it
# is only ever written by the mkfs run above. It is named by everything that shapes what mkfs
# writes (sizes, reserve, the mkfs binary), so a changed plan or an upgraded e2fsprogs makes a new
# one. Every session's disk then has the same filesystem UUID and directory-hash seed: the disks
# are mounted only by fd, in namespaces of their own, and nothing names them by UUID.
TEMPLATES = "disk"  # under the cache root; deploy's last destroy on a host removes it (Layout.disk_templates)
TEMPLATES_KEPT = 8
# a template is a few hundred KiB of metadata in a sparse file; one with more data (a filesystem
# without holes holds it all) would cost more to copy than mkfs takes to write
TEMPLATE_MAX_DATA = 32 << 20


def _template_key(plan: DiskPlan, mkfs: str) -> str:
    import hashlib

    try:
        st = os.stat(mkfs)
        binary = f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    except OSError:
        binary = "?"
    text = f"ext4 {plan.image_bytes} {plan.inodes + 16} {_reserved(plan)} {binary}"
    return f"ext4-{hashlib.sha256(text.encode()).hexdigest()[:24]}.img"


def _from_template(key: str, fd: int, size: int) -> bool:
    """Fill the fresh image `fd` from the kept template; False (nothing copied) when there is none usable."""
    from mur import privatecache

    opened = privatecache.open_file(TEMPLATES, key)
    if opened is None:
        return False
    src, st = opened
    try:
        if st.st_size != size or st.st_blocks * 512 > TEMPLATE_MAX_DATA:
            return False
        os.ftruncate(fd, size)
        copy_sparse(src, fd, size)
        return True
    except OSError:
        os.ftruncate(fd, 0)
        return False
    finally:
        os.close(src)


def _keep_template(key: str, fd: int, size: int) -> None:
    """Keep a copy of the image mkfs just made as the template (best effort, atomic)."""
    import secrets

    from mur import privatecache

    try:
        if os.fstat(fd).st_blocks * 512 > TEMPLATE_MAX_DATA:
            return
    except OSError:
        return
    dirfd = privatecache.writable_dir(TEMPLATES)
    if dirfd is None:
        return
    tmp = f".{key}.{secrets.token_hex(4)}"
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dirfd)
        try:
            os.ftruncate(out, size)
            copy_sparse(fd, out, size)
        finally:
            os.close(out)
        os.rename(tmp, key, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        privatecache.prune(dirfd, TEMPLATES_KEPT)
    except OSError:
        try:
            os.unlink(tmp, dir_fd=dirfd)
        except OSError:
            pass
    finally:
        os.close(dirfd)


def copy_sparse(src: int, dst: int, size: int) -> None:
    """The data extents of `src` into `dst` at the same offsets (`dst` already `size` long and
    empty): the holes stay holes, so a 1 GiB image with 200 KiB of metadata copies 200 KiB."""
    offset = 0
    while offset < size:
        try:
            data = os.lseek(src, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data past offset
                return
            raise
        end = os.lseek(src, data, os.SEEK_HOLE)
        pos = data
        while pos < end:
            n = os.copy_file_range(src, dst, end - pos, pos, pos)
            if n == 0:
                raise OSError(errno.EIO, "the template ended early")
            pos += n
        offset = end


# --- the holder: mounting --------------------------------------------------------------------------


def _dev(path: str) -> str:
    """``path`` under /dev as the holder reaches it: through /oldroot once the scratch root is in place."""
    return "/oldroot" + path if os.path.isdir("/oldroot/dev") else path


def _loop_attach(image_fd: int) -> tuple[str, int]:
    """A free loop device bound to ``image_fd`` with autoclear; returns (/dev/loopN, its fd). The fd
    must stay open until the device is mounted: autoclear detaches it at its last close."""
    control = os.open(_dev("/dev/loop-control"), os.O_RDWR | os.O_CLOEXEC)
    try:
        for attempt in range(LOOP_TRIES):
            if attempt:  # another session took the one we were given: sessions started at once all ask
                #          for the same free number; a random pause spreads them (util-linux's losetup retries too)
                time.sleep(os.urandom(1)[0] / 255 * 0.002 * min(1 + attempt // 4, 8))
            number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            device = f"/dev/loop{number}"
            loop = os.open(_dev(device), os.O_RDWR | os.O_CLOEXEC)
            info = bytearray(LOOP_INFO64_SIZE)
            struct.pack_into("I", info, LO_FLAGS_OFFSET, LO_FLAGS_AUTOCLEAR)
            try:
                fcntl.ioctl(loop, LOOP_CONFIGURE, struct.pack("II", image_fd, 0) + bytes(info) + bytes(64))
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    os.close(loop)
                    continue  # another process took it between GET_FREE and CONFIGURE
                if exc.errno not in (errno.EINVAL, errno.ENOTTY):
                    os.close(loop)
                    raise
                try:  # before Linux 5.8
                    fcntl.ioctl(loop, LOOP_SET_FD, image_fd)
                    fcntl.ioctl(loop, LOOP_SET_STATUS64, bytes(info))
                except OSError:
                    os.close(loop)
                    raise
            return device, loop
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(control)


def mount_disk(plan: DiskPlan, target: str, image_fd: int | None, *, owner: tuple[int, int] | None) -> None:
    """Mount the disk at ``target`` with ``work/`` and ``tmp/`` in it (the holder's side)."""
    from mur.sandbox.rootfs import MS_NODEV, MS_NOEXEC, MS_NOSUID, mount

    flags = MS_NOSUID | MS_NODEV | (0 if plan.exec_ else MS_NOEXEC)
    if plan.mechanism == "ext4-loop":
        if image_fd is None:
            raise OSError(errno.EBADF, "no disk image")
        device, loop = _loop_attach(image_fd)
        try:
            mount(_dev(device), target, "ext4", flags, b"noinit_itable")
        finally:
            os.close(loop)
    elif plan.mechanism == "tmpfs":
        mount("tmpfs", target, "tmpfs", flags,
              f"size={plan.capacity},nr_inodes={plan.inodes + 3},mode=0755".encode())
    else:
        raise OSError(errno.EINVAL, f"no disk to mount for {plan.mechanism}")
    os.mkdir(f"{target}/{WORK}", 0o755)
    os.mkdir(f"{target}/{TMP}", 0o1777)
    os.chmod(f"{target}/{TMP}", 0o1777)
    if owner is not None:
        os.chown(f"{target}/{WORK}", *owner)
    _trim(target, plan.limit)


def _trim(target: str, limit: int) -> None:
    """Preallocate what the disk has beyond ``limit`` free bytes (for an unprivileged writer), so
    exactly ``limit`` is left for the tools. An ext4 disk's reserved blocks above it stay root's (the
    runtime's headroom); a tmpfs's headroom is this file, released when a session starts too full
    for the runtime's own files (HeldDisk.copy_in)."""
    st = os.statvfs(target)
    extra = st.f_bavail * st.f_frsize - limit
    if extra <= 0:
        return
    fd = os.open(f"{target}/{RESERVE}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.posix_fallocate(fd, 0, extra)
    finally:
        os.close(fd)


# --- mur: the disk held by fd ------------------------------------------------------------------------


def full_slack(limit: int) -> int:
    """Free bytes below which a session disk counts as full (see FULL_SLACK_*)."""
    return min(FULL_SLACK_MAX, max(FULL_SLACK_MIN, limit // FULL_SLACK_SHARE))


@dataclass
class Usage:
    used: int  # bytes the tools' files take, as the disk counts them
    inodes: int
    full: bool  # no block or no inode left: the next write fails


@dataclass
class HeldDisk:
    """The disk as the runtime holds it (fds received from the holder); see the module docstring."""

    plan: DiskPlan
    root_fd: int
    work_fd: int
    image: Path | None = None
    snapshot: mirror.Snapshot | None = None
    base_used: int = 0
    base_inodes: int = 0
    notes: list[str] = field(default_factory=list)
    full_below: int = 0  # free bytes under which the disk counts as full (set once it is filled from the host)

    def __post_init__(self) -> None:
        st = os.fstatvfs(self.root_fd)
        # what the empty disk already uses: the root, work/, tmp/ (an ext4 disk's lost+found, the trim)
        self.base_used = (st.f_blocks - st.f_bfree) * st.f_frsize
        self.base_inodes = st.f_files - st.f_favail

    @property
    def capacity(self) -> int:
        return self.plan.capacity

    def usage(self) -> Usage:
        """What the tools' files take (data, preallocation, directories, links, xattrs, files with no
        name), as the disk counts it; full once the tools' next write is refused (or near enough:
        ext4 refuses a large folio whole, so some blocks stay free), or no inode is left."""
        st = os.fstatvfs(self.root_fd)
        used = max(0, (st.f_blocks - st.f_bfree) * st.f_frsize - self.base_used)
        inodes = max(0, (st.f_files - st.f_favail) - self.base_inodes)
        full = st.f_bavail * st.f_frsize < (self.full_below or full_slack(self.plan.limit))
        return Usage(used, inodes, full or st.f_favail == 0)

    def copy_in(self, host: Path, owner: tuple[int, int] | None, deadline: float | None = None) -> None:
        """The host workdir's content onto the disk (before any tool runs); raises mirror.DiskFull,
        also when what came in is more than the ceiling (a session would be born past it)."""
        fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self.snapshot = mirror.copy_in(fd, self.work_fd, owner=owner, deadline=deadline, leave=(STAGED,))
        finally:
            os.close(fd)
        self.notes += self.snapshot.notes
        came = self.usage().used
        if came > self.plan.limit:
            raise mirror.DiskFull(28, f"{came} bytes are already there, past the ceiling", str(host))
        st = os.fstatvfs(self.root_fd)
        if st.f_bavail * st.f_frsize < RUNTIME_HEADROOM // 2 and self.plan.mechanism == "tmpfs":
            # brought in at its ceiling (a rerun after E-RUN-013): the runtime's own files need the
            # headroom (ext4 keeps it as root's reserved blocks; a tmpfs as this file)
            try:
                os.unlink(RESERVE, dir_fd=self.root_fd)
            except FileNotFoundError:
                pass
            st = os.fstatvfs(self.root_fd)
        # a workdir brought in nearly full is not full until this session takes half of what is left
        self.full_below = min(full_slack(self.plan.limit), st.f_bavail * st.f_frsize // 2)

    def copy_out(self, host: Path, new_owner: tuple[int, int] | None, deadline: float | None = None) -> mirror.Report:
        """What the tools left on the disk back into the host workdir (see mirror.copy_out)."""
        fd = os.open(host, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            return mirror.copy_out(self.work_fd, fd, self.snapshot or mirror.Snapshot(), new_owner=new_owner,
                                   budget=self.capacity, deadline=deadline, leave=(STAGED,))
        finally:
            os.close(fd)

    def close(self, *, keep_image: bool = False) -> None:
        for name in ("work_fd", "root_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)
        if self.image is not None and not keep_image:
            try:
                self.image.unlink()
            except OSError:
                pass
