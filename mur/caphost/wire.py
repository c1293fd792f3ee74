"""Where the capsule host listens and how client and host talk (standard library only: the client
imports nothing else before it hands off).

Frames on a UNIX stream socket: a 4-byte big-endian length, then a JSON object; file descriptors
ride on a frame as SCM_RIGHTS. The socket lives in a 0700 directory of ours (`$XDG_RUNTIME_DIR/mur`
when that is ours, else `~/.murmur/run`), named by a key of the code that would serve: the
interpreter, the mur package's location and version, and the newest mtime of its modules, so a
client never gets a host running other code (an upgrade, an edit) and hosts of different builds
never meet.
"""

from __future__ import annotations

import array
import json
import os
import _socket as socket  # the C module: socket.py's enum conversions cost every client ~3 ms
import stat
import struct
import sys
from pathlib import Path

MAX_FRAME = 4 * 1024 * 1024  # an environment and arguments; far more than any real one
MAX_FDS = 8
SOCKET_MAX = 100  # sun_path holds 108 bytes


def code_key() -> str:
    """What identifies the code a host runs: interpreter, mur's location and version, newest module."""
    import mur

    package = Path(mur.__file__).resolve().parent
    newest = 0
    stack = [str(package)]
    while stack:  # os.scandir by hand: a third less than os.walk + os.stat, on every client's start
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.name.endswith(".py"):
                    newest = max(newest, entry.stat().st_mtime_ns)
                elif entry.name != "__pycache__" and entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
            except OSError:
                pass
    text = f"{sys.executable}\0{sys.version}\0{package}\0{mur.__version__}\0{newest}"
    try:
        from _sha256 import sha256  # CPython's own: no OpenSSL mapped into every client
    except ImportError:  # pragma: no cover - a build without it
        from hashlib import sha256
    return sha256(text.encode()).hexdigest()[:16]


def _private_dir(path: Path) -> bool:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def runtime_dir() -> Path | None:
    """A directory only we can use for the socket, or None."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    candidates = [Path(xdg) / "mur"] if xdg else []
    home = os.environ.get("HOME")
    if home:
        candidates.append(Path(home) / ".murmur" / "run")
    for path in candidates:
        if _private_dir(path):
            return path
    return None


def socket_path(key: str) -> Path | None:
    directory = runtime_dir()
    return None if directory is None else directory / f"caphost-{key}.sock"


def sweep_leftovers(keep: Path) -> None:
    """Remove what hosts of other code (an older mur, an edit) left and no host holds: the socket of
    one that died unannounced (a reboot, kill -9), its `.last`, its `.lock` (whose pid would name a
    process it no longer is). Under their lock, so never a live host's (a host that opened a lock
    file removed here takes a fresh one: `locked`); without a lock file, the socket and `.last` only
    (a host starting now makes its lock before anything else). `keep`: the caller's own socket path."""
    import re  # a host's work: never compiled in a client

    try:
        names = os.listdir(keep.parent)
    except OSError:
        return
    host_file = re.compile(r"caphost-([0-9a-f]+)\.sock(?:\.last|\.lock|\.starting)?")
    keys = {m.group(1) for m in map(host_file.fullmatch, names) if m} - {keep.name[len("caphost-"):-len(".sock")]}
    for key in keys:
        base = keep.parent / f"caphost-{key}.sock"
        lock = Path(f"{base}.lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            fd = -1
        except OSError:
            continue
        try:
            if fd >= 0 and not locked(fd, lock):
                continue
            for leftover in (base, Path(f"{base}.last"), *((lock, Path(f"{base}.starting")) if fd >= 0 else ())):
                try:
                    os.unlink(leftover)  # the lock last, while we hold it
                except OSError:
                    pass
        finally:
            if fd >= 0:
                os.close(fd)


def locked(fd: int, path: Path) -> bool:
    """flock `fd` (opened from `path`) exclusively, without waiting; True when held and `path` is still that file
    (a sweep may have removed it between the open and the lock: then it is not the lock any more)."""
    import fcntl  # here: a client never locks, and imports as little as it can

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    try:
        same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except OSError:
        same = False
    if not same:
        fcntl.flock(fd, fcntl.LOCK_UN)
    return same


def addressed(sock: socket.socket, path: Path, how: str) -> None:
    """sock.bind(path) or sock.connect(path) (`how`), through /proc/self/fd when the path is longer
    than a socket address holds (a deep HOME)."""
    if len(os.fsencode(path)) <= SOCKET_MAX:
        getattr(sock, how)(str(path))
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        getattr(sock, how)(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)


def send(sock: socket.socket, obj: dict[str, object], fds: list[int] | None = None) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    frame = struct.pack(">I", len(data)) + data
    if fds:
        sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        sock.sendall(frame)


def recv(sock: socket.socket) -> tuple[dict[str, object] | None, list[int]]:
    """One frame and the fds that came with it; (None, []) at EOF."""
    fds: list[int] = []
    head = b""
    while len(head) < 4:
        data, ancdata, _flags, _addr = sock.recvmsg(4 - len(head), socket.CMSG_SPACE(MAX_FDS * 4))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += array.array("i", payload[: len(payload) - len(payload) % 4]).tolist()
        if not data:
            for fd in fds:
                os.close(fd)
            return None, []
        head += data
    (size,) = struct.unpack(">I", head)
    if size > MAX_FRAME:
        for fd in fds:
            os.close(fd)
        raise ValueError("frame too large")
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        body += chunk
    return json.loads(body), fds


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def peer_pid(sock: socket.socket) -> int:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[0]
