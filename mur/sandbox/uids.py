"""A uid (and gid of the same number) of its own for each session's tools, when mur runs as root.

Like systemd's DynamicUser: leased from a reserved range, held by an flock on
``/run/mur/uids/<uid>`` for the whole session, released at ``close()``. Distinct uids are what
make the kernel refuse a tool that tries to act on another session's processes (or any daemon's):
kill, setpriority, prlimit, sched_setaffinity, ioprio_set, process_madvise and ptrace all require
the same uid (or a capability the tool does not have).

* **Range.** 0x7A6D0000-0x7A6DFFFF, which systemd documents as unused (above its container ranges,
  below its "foreign" range). Inside a user namespace that does not map it (rootless containers
  map 65536 ids) the fallback is systemd's own DynamicUser range, 61184-65519.
* **Stale leases.** A lock file nobody holds belongs to a mur that died without ``close()``
  (kill -9): the next lease kills whatever still runs as that uid and removes the file.
* **Reclaim.** Every lease starts by killing every process of the uid: a forked child takes the
  uid and calls kill(-1, SIGKILL), which reaches exactly the processes of that uid and is atomic
  against their forks. Scanning /proc instead would miss a tool that made itself non-dumpable
  (its /proc entry then belongs to root).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pwd
import signal
import stat
from dataclasses import dataclass

from mur.digits import is_digits
from mur.ids import SESSION_UID_RANGES

RANGES = SESSION_UID_RANGES
STATE_DIR = "/run/mur/uids"


class UidUnavailable(Exception):
    """No uid could be leased; ``str()`` says why."""


@dataclass
class UidLease:
    uid: int
    gid: int
    _dir_fd: int
    _fd: int | None

    def release(self) -> None:
        """Kill what is left of the uid, drop the lock file (idempotent)."""
        if self._fd is None:
            return
        reclaim(self.uid)
        try:
            os.unlink(str(self.uid), dir_fd=self._dir_fd)
        except OSError:
            pass
        os.close(self._fd)
        os.close(self._dir_fd)
        self._fd = None


def mapped(text: str, lo: int, hi: int) -> bool:
    """Does a /proc/self/{uid,gid}_map text map every id in [lo, hi]?"""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            inner, _outer, count = (int(p) for p in parts)
            if inner <= lo and hi < inner + count:
                return True
    return False


def usable_range(uid_map: str, gid_map: str) -> tuple[int, int] | None:
    """The first reserved range this user namespace maps for both uids and gids."""
    for lo, hi in RANGES:
        if mapped(uid_map, lo, hi) and mapped(gid_map, lo, hi):
            return lo, hi
    return None


def reclaim(uid: int) -> None:
    """SIGKILL every process whose uid is ``uid`` (the caller must be root)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            if os.getresuid() == (uid, uid, uid) and uid != 0:  # as root, kill(-1) would end the machine
                os.kill(-1, signal.SIGKILL)  # never the caller itself
        except OSError:
            pass
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _state_dir(path: str) -> int:
    """Open the lock directory (creating it 0700), refusing one that is not root's own."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    st = os.fstat(fd)
    if st.st_uid != 0 or st.st_mode & 0o022:
        os.close(fd)
        raise UidUnavailable(f"{path} must be a directory owned by root and writable only by it")
    return fd


def _try_lock(dir_fd: int, name: str) -> int | None:
    """An fd holding the lock on ``name``, or None when someone else holds it."""
    fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:  # the holder may have unlinked it between our open and our lock: then it is not ours
        current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (current.st_dev, current.st_ino) != (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
            raise FileNotFoundError
    except FileNotFoundError:
        os.close(fd)
        return None
    return fd


def _sweep_stale(dir_fd: int) -> None:
    for name in os.listdir(dir_fd):
        if not is_digits(name):
            continue
        try:
            if not stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                continue
            fd = _try_lock(dir_fd, name)
        except OSError:
            continue
        if fd is None:
            continue  # a live session
        reclaim(int(name))
        os.unlink(name, dir_fd=dir_fd)
        os.close(fd)


def _known(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def lease(session_id: str, state_dir: str = STATE_DIR) -> UidLease:
    """Lease a free uid for ``session_id``; raises UidUnavailable."""
    try:
        with open("/proc/self/uid_map") as fh:
            uid_map = fh.read()
        with open("/proc/self/gid_map") as fh:
            gid_map = fh.read()
    except OSError:
        uid_map = gid_map = "0 0 4294967295\n"
    found = usable_range(uid_map, gid_map)
    if found is None:
        raise UidUnavailable("this user namespace maps none of mur's reserved uid ranges "
                             + ", ".join(f"{lo}-{hi}" for lo, hi in RANGES))
    lo, hi = found
    try:
        dir_fd = _state_dir(state_dir)
    except OSError as exc:
        raise UidUnavailable(f"cannot use {state_dir}: {exc.strerror or exc}") from exc
    try:
        _sweep_stale(dir_fd)
        size = hi - lo + 1
        start = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:4], "big") % size
        for step in range(size):
            uid = lo + (start + step) % size
            if _known(uid):
                continue  # a user someone created in the range: never hand it out
            fd = _try_lock(dir_fd, str(uid))
            if fd is None:
                continue
            reclaim(uid)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {session_id}\n".encode())
            return UidLease(uid, uid, dir_fd, fd)
    except OSError as exc:
        os.close(dir_fd)
        raise UidUnavailable(f"cannot lease a uid under {state_dir}: {exc.strerror or exc}") from exc
    os.close(dir_fd)
    raise UidUnavailable(f"every uid in {lo}-{hi} is leased")
