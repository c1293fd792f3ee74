"""File access that a tool cannot redirect: the runtime's only way into a directory tools can write.

mur is often root while its tools are not, and the tools can rename, replace or link any entry of
their workdir between two of the runtime's accesses. So every access the runtime makes there goes
through a ``Tree``: the directory is opened once, and each path is resolved *relative to that fd*
with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)``
(an ``O_NOFOLLOW`` walk, component by component, where the kernel lacks openat2). On top of that:

* nothing is read or written in place through a hard link: a file the runtime reads or appends to
  must be a regular file with ``st_nlink == 1`` (else ``LinkRefused``);
* writes are atomic and never open an existing file: a new file is created ``O_EXCL`` beside the
  target and renamed over it, which replaces whatever name was there (file, symlink, hard link);
* removal (``unlink``, ``remove_tree``) and walks (``walk``) work on directory fds and never follow;
  they are iterative (mur.fswalk): no depth a tool can build exhausts the stack or the fd table.

A violation raises ``LinkRefused`` (an OSError: ELOOP for symlinks, EMLINK for hard links, EXDEV
for a path that leaves the tree). Callers turn it into ``error[E-IO-002]``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from pathlib import Path
from typing import Iterator

from mur import fswalk

SYS_OPENAT2 = 437  # the same number on every architecture Linux added it to (5.6+)
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_TMP_TRIES = 100


class LinkRefused(OSError):
    """The runtime refused a path in a tool-writable tree: a link, or a way out of the tree."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = getattr(_libc, "syscall", None)
if _syscall is not None:
    _syscall.restype = ctypes.c_long
_openat2_ok: bool | None = None  # probed on first use


def _creates(flags: int) -> bool:
    tmpfile = getattr(os, "O_TMPFILE", 0)
    return bool(flags & os.O_CREAT) or bool(tmpfile and flags & tmpfile == tmpfile)


def _openat2(dirfd: int, rel: str, flags: int, mode: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode if _creates(flags) else 0, RESOLVE)
    for _ in range(10):  # EAGAIN: a concurrent rename made the kernel unsure; retrying is documented
        ctypes.set_errno(0)
        fd = _syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), os.fsencode(rel), ctypes.byref(how),
                      ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), rel)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), rel)


def openat2_available() -> bool:
    """Does this kernel (and any seccomp filter we run under) give us openat2?"""
    global _openat2_ok
    if _openat2_ok is None:
        if _syscall is None:
            _openat2_ok = False
        else:
            root = os.open("/", DIR_FLAGS)
            try:
                os.close(_openat2(root, ".", DIR_FLAGS, 0))
                _openat2_ok = True
            except OSError as exc:
                _openat2_ok = exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL)
            finally:
                os.close(root)
    return _openat2_ok


def _parts(rel: str | os.PathLike) -> list[str]:
    text = os.fspath(rel)
    if text.startswith("/"):
        raise LinkRefused(errno.EXDEV, "an absolute path leaves the tree", text)
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise LinkRefused(errno.EXDEV, "'..' leaves the tree", text)
    return parts


def _refusal(exc: OSError, rel: str) -> OSError:
    if exc.errno in (errno.ELOOP, errno.EXDEV):
        what = "a symbolic link" if exc.errno == errno.ELOOP else "a path out of the tree"
        return LinkRefused(exc.errno, f"{what} is in the way", rel)
    return exc


class Tree:
    """A directory held open by fd; every access below it is resolved beneath it, never through a link.

    The root path itself is trusted (its parents are not tool-writable); ``Tree(path)`` refuses a
    root that is itself a symlink. Use as a context manager or call ``close()``.
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = False, mode: int = 0o777):
        self.path = Path(path)
        if create:
            os.makedirs(self.path, mode=mode, exist_ok=True)
        try:
            self.fd = os.open(self.path, DIR_FLAGS | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and os.path.islink(self.path):
                raise LinkRefused(errno.ELOOP, "the tree root is a symbolic link", str(self.path)) from None
            raise _refusal(exc, str(self.path)) from None
        self.dev = os.fstat(self.fd).st_dev

    def __enter__(self) -> "Tree":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"Tree({str(self.path)!r})"

    # --- resolution -------------------------------------------------------------------------------

    def open(self, rel: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
        """An fd for ``rel`` beneath the tree (``.`` is the root itself); never follows a link."""
        parts = _parts(rel)
        if not parts:
            return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=self.fd)
        text = "/".join(parts)
        try:
            if openat2_available():
                return _openat2(self.fd, text, flags, mode)
            return self._walk_open(parts, flags, mode)
        except OSError as exc:
            raise _refusal(exc, text) from None

    def _walk_open(self, parts: list[str], flags: int, mode: int) -> int:
        """The fallback: one ``O_NOFOLLOW`` open per component, staying on the root's filesystem."""
        current = self.fd
        name = parts[0]
        try:
            for name in parts[:-1]:
                nxt = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=current)
                if current != self.fd:
                    os.close(current)
                current = nxt
                if os.fstat(current).st_dev != self.dev:
                    raise OSError(errno.EXDEV, "crosses a mount point")
            name = parts[-1]
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
            if os.fstat(fd).st_dev != self.dev:
                os.close(fd)
                raise OSError(errno.EXDEV, "crosses a mount point")
            return fd
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and _is_link(name, current):
                raise OSError(errno.ELOOP, "a symbolic link") from None
            raise
        finally:
            if current != self.fd:
                os.close(current)

    def _parent(self, rel: str | os.PathLike) -> tuple[int, str]:
        """(fd of rel's directory, its last component): the caller closes the fd."""
        parts = _parts(rel)
        if not parts:
            raise LinkRefused(errno.EINVAL, "the tree root has no parent here", os.fspath(rel))
        return self.open("/".join(parts[:-1]) or ".", DIR_FLAGS), parts[-1]

    def subtree(self, rel: str | os.PathLike, *, create: bool = False, mode: int = 0o777) -> "Tree":
        """A Tree for a directory beneath this one (created, with its parents, when asked)."""
        fd = self.makedirs(rel, mode) if create else self.open(rel, DIR_FLAGS)
        sub = Tree.__new__(Tree)
        sub.path, sub.fd, sub.dev = self.path.joinpath(*_parts(rel)), fd, self.dev
        return sub

    # --- reads ----------------------------------------------------------------------------------

    def lstat(self, rel: str | os.PathLike) -> os.stat_result | None:
        """The entry's own stat (a symlink is reported as one), or None when it does not exist."""
        try:
            parent, name = self._parent(rel)
        except FileNotFoundError:
            return None
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent)

    def read_bytes(self, rel: str | os.PathLike, limit: int | None = None) -> bytes:
        """A regular, singly linked file's bytes (at most ``limit``)."""
        fd = self.open(rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            check_single(fd, rel)
            os.set_blocking(fd, True)
            chunks, total = [], 0
            while limit is None or total < limit:
                chunk = os.read(fd, 1 << 20 if limit is None else min(1 << 20, limit - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_text(self, rel: str | os.PathLike, limit: int | None = None) -> str:
        return self.read_bytes(rel, limit).decode("utf-8", errors="replace")

    # --- writes ---------------------------------------------------------------------------------

    def makedirs(self, rel: str | os.PathLike, mode: int = 0o777) -> int:
        """mkdir -p beneath the tree, refusing any link on the way; returns the last directory's fd."""
        current = os.dup(self.fd)
        try:
            for name in _parts(rel):
                try:
                    os.mkdir(name, mode, dir_fd=current)
                except FileExistsError:
                    pass
                try:
                    nxt = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=current)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise LinkRefused(errno.ELOOP, "not a directory (a link or a file is in the way)",
                                          os.fspath(rel)) from None
                    raise
                os.close(current)
                current = nxt
                if os.fstat(current).st_dev != self.dev:
                    raise LinkRefused(errno.EXDEV, "crosses a mount point", os.fspath(rel))
            return current
        except BaseException:
            os.close(current)
            raise

    def own_dir(self, rel: str | os.PathLike, mode: int = 0o777) -> int:
        """``makedirs(rel)`` for a name the runtime owns in a tool-writable tree: a link or file a tool
        put there instead of the directory is removed first (the name, never what it points to)."""
        st = self.lstat(rel)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            self.unlink(rel)
        return self.makedirs(rel, mode)

    def create(self, rel: str | os.PathLike, mode: int = 0o644, flags: int = os.O_WRONLY, *,
               parents: bool = False) -> int:
        """A new file, created ``O_EXCL`` (never an existing name, never through a link); ``parents``
        creates its directory first."""
        if not parents:
            return self.open(rel, flags | os.O_CREAT | os.O_EXCL, mode)
        parts = _parts(rel)
        parent = self.makedirs("/".join(parts[:-1]))
        try:
            return os.open(parts[-1], flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            raise _refusal(exc, os.fspath(rel)) from None
        finally:
            os.close(parent)

    def append(self, rel: str | os.PathLike, mode: int = 0o644) -> int:
        """An ``O_APPEND`` fd on a regular, singly linked file (created, with its directory, when missing)."""
        parts = _parts(rel)
        if not parts:
            raise LinkRefused(errno.EISDIR, "cannot append to the tree root", os.fspath(rel))
        parent = self.makedirs("/".join(parts[:-1]))
        try:
            fd = os.open(parts[-1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
                         | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
        except OSError as exc:
            raise _refusal(exc, os.fspath(rel)) from None
        finally:
            os.close(parent)
        try:
            check_single(fd, rel)
            os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_bytes(self, rel: str | os.PathLike, data: bytes, mode: int | None = None, *, durable: bool = True) -> None:
        """Atomically replace ``rel`` with ``data`` (temp file + rename in its directory, which is
        created when missing); ``durable=False`` skips the fsyncs for scratch files."""
        parts = _parts(rel)
        if not parts:
            raise LinkRefused(errno.EISDIR, "cannot write the tree root", os.fspath(rel))
        # a name in the root is written in the held directory itself
        parent = self.fd if len(parts) == 1 else self.makedirs("/".join(parts[:-1]))
        try:
            write_atomic_at(parent, parts[-1], data, mode, durable)
        finally:
            if parent != self.fd:
                os.close(parent)

    def write_text(self, rel: str | os.PathLike, text: str, mode: int | None = None, *, durable: bool = True) -> None:
        self.write_bytes(rel, text.encode("utf-8"), mode, durable=durable)

    # --- removal and walks ----------------------------------------------------------------------

    def unlink(self, rel: str | os.PathLike, *, missing_ok: bool = True) -> None:
        """Remove the name itself (a symlink is removed, never its target)."""
        parts = _parts(rel)
        if len(parts) == 1:  # a name in the root: removed in the held directory itself
            parent, name = self.fd, parts[0]
        else:
            try:
                parent, name = self._parent(rel)
            except FileNotFoundError:
                if missing_ok:
                    return
                raise
        try:
            os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            if not missing_ok:
                raise
        finally:
            if parent != self.fd:
                os.close(parent)

    def remove_tree(self, rel: str | os.PathLike, *, deadline: float | None = None) -> None:
        """rm -rf of ``rel`` through directory fds: a link inside is removed, never followed; any
        depth, a bounded number of fds (mur.fswalk), within ``deadline`` (time.monotonic()) if given."""
        try:
            parent, name = self._parent(rel)
        except FileNotFoundError:
            return
        try:
            fswalk.remove_entry(parent, name, deadline=deadline)
        finally:
            os.close(parent)

    def walk(self, *, deadline: float | None = None) -> Iterator[tuple[int, str, os.stat_result]]:
        """(fd of the containing directory, name, lstat) for every entry, parents before their
        entries, never following a link or leaving the filesystem, at any depth (mur.fswalk); the
        root itself comes first as (fd, ".", st). The fd is only valid during that step."""
        yield self.fd, ".", os.fstat(self.fd)
        for step in fswalk.walk(self.fd, deadline=deadline):
            if step.kind != "leave":
                yield step.dirfd, step.name, step.st


def _is_link(name: str, dirfd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def check_single(fd: int, rel: str | os.PathLike = "") -> os.stat_result:
    """A regular file with exactly one link, or LinkRefused."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise LinkRefused(errno.EINVAL, "not a regular file", os.fspath(rel))
    if st.st_nlink != 1:
        raise LinkRefused(errno.EMLINK, f"a hard link ({st.st_nlink} names for one file)", os.fspath(rel))
    return st


def write_atomic_at(dirfd: int, name: str, data: bytes, mode: int | None = 0o644, durable: bool = True,
                    swap: bool = False) -> None:
    """Write ``name`` in the directory ``dirfd`` atomically: a fresh ``O_EXCL`` temp file renamed over
    ``name`` (which replaces the name, never writes through it). ``mode`` is set exactly; None
    creates it 0666 less the umask or the directory's default ACL, as a plain open() would.
    ``durable`` adds the fsyncs (file, then directory) that make the content survive a crash.
    ``swap`` (for a file rewritten often, not durably): when ``name`` is a regular file, exchange the
    two names (renameat2 RENAME_EXCHANGE) and remove the old content, instead of renaming over it:
    as atomic for readers, but ext4 does not flush the new data first (auto_da_alloc's cost of a
    rename over an existing file, a millisecond and more)."""
    tmp, fd = "", -1
    for attempt in range(_TMP_TRIES):
        tmp = f".{name[:64]}.{os.getpid()}.{attempt}.{os.urandom(4).hex()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600 if mode is not None else 0o666, dir_fd=dirfd)
            break
        except FileExistsError:
            continue
    if fd < 0:
        raise OSError(errno.EEXIST, "no free temporary name", name)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if mode is not None:
            os.fchmod(fd, mode)
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        if swap and not durable and _exchange(dirfd, tmp, name):
            try:
                os.unlink(tmp, dir_fd=dirfd)  # the old content, under the temp name now
            except OSError:
                pass
        else:
            os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dirfd)
        except OSError:
            pass
        raise
    if durable:
        try:
            os.fsync(dirfd)
        except OSError:
            pass


RENAME_EXCHANGE = 2


def _exchange(dirfd: int, a: str, b: str) -> bool:
    """Swap the names `a` and `b` in `dirfd` when `b` is a regular file; False when it is not, or
    the kernel or filesystem cannot (the caller renames instead)."""
    try:
        if not stat.S_ISREG(os.lstat(b, dir_fd=dirfd).st_mode):
            return False
    except OSError:
        return False
    renameat2 = getattr(_libc, "renameat2", None)  # glibc 2.28 and later
    if renameat2 is None:
        return False
    return renameat2(ctypes.c_int(dirfd), os.fsencode(a), ctypes.c_int(dirfd), os.fsencode(b),
                     ctypes.c_uint(RENAME_EXCHANGE)) == 0


def open_append(path: str | os.PathLike, mode: int = 0o644) -> int:
    """``Tree.append`` for a file in a runtime-owned directory given by path (its parent is opened
    without following a link; the file must be regular and singly linked)."""
    path = Path(path)
    with Tree(path.parent) as tree:
        return tree.append(path.name, mode)


def append_text(path: str | os.PathLike, text: str) -> None:
    """Append ``text`` to ``path`` in one write (see ``open_append``)."""
    fd = open_append(path)
    try:
        os.write(fd, text.encode("utf-8"))
    finally:
        os.close(fd)


def proc_path(fd: int) -> str:
    """``/proc/self/fd/N``: a path naming exactly the open directory, for APIs that only take paths."""
    return f"/proc/self/fd/{fd}"


def inside(path: str | os.PathLike, root: str | os.PathLike) -> bool:
    """Is ``path`` ``root`` or beneath it, lexically or once symlinks are resolved?"""
    def under(p: str, r: str) -> bool:
        return p == r or p.startswith(r.rstrip("/") + "/")

    p, r = os.path.abspath(path), os.path.abspath(root)
    return under(p, r) or under(os.path.realpath(p), os.path.realpath(r))
