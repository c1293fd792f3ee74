"""Passing the listening socket from a running front to its successor (an upgrade of the front itself).

Why not two sockets with SO_REUSEPORT: Linux spreads new connections over every socket bound to the
port, and when one of them closes, the connections waiting in its own accept queue are reset. Passing
the one socket (SCM_RIGHTS over the front's unix control socket, 0600 in the front's own directory)
keeps a single accept queue: both processes accept from it for a moment, then the old one stops and
finishes what it started. No connection is refused or reset at any point.

    new front                          old front (serving)
    connect control.sock  ----------> "handoff"
                          <---------- "ok <pid>" + the listening socket (SCM_RIGHTS)
    start accepting on it
                          ----------> "release"
                          <---------- "bye": it stopped accepting; it finishes its connections, exits
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Callable

TIMEOUT = 10.0
SUN_PATH_MAX = 100  # sockaddr_un holds 108 bytes; a deployment under a long HOME needs a way round


class _Short:
    """A short name for a unix socket path: /proc/self/fd/<dir fd>/<name> when the path is too long."""

    def __init__(self, path: Path):
        self.fd: int | None = None
        self.name = str(path)
        if len(self.name) > SUN_PATH_MAX:
            self.fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            self.name = f"/proc/self/fd/{self.fd}/{path.name}"

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def take_over(control: Path) -> tuple[socket.socket, socket.socket, int] | None:
    """(listening socket, control connection, old pid) from a front serving at `control`, else None."""
    if not control.exists():
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(TIMEOUT)
    try:
        with _Short(control) as name:
            conn.connect(name)
        conn.sendall(b"handoff\n")
        msg, fds, _flags, _addr = socket.recv_fds(conn, 256, 1)
    except OSError:
        conn.close()
        return None  # a stale socket file: nobody serves
    if not msg.startswith(b"ok ") or not fds:
        conn.close()
        for fd in fds:
            os.close(fd)
        return None
    sock = socket.socket(fileno=fds[0])
    return sock, conn, int(msg.split()[1])


def release(conn: socket.socket) -> None:
    """Tell the old front to stop accepting (the new one accepts now); wait for its word."""
    try:
        conn.sendall(b"release\n")
        conn.recv(16)
    except OSError:
        pass
    finally:
        conn.close()


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    return sock


def control_socket(path: Path) -> socket.socket:
    """Bind the control socket under a temporary name and rename it into place (a successor's rename
    replaces ours, so the path always leads to the newest front)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        with _Short(tmp) as name:
            sock.bind(name)
    finally:
        os.umask(old)
    sock.listen(4)
    os.replace(tmp, path)
    return sock


def serve_one(conn: socket.socket, listening: socket.socket, stop_accepting: Callable[[], None]) -> bool:
    """Answer one successor on the control socket (blocking; run off the event loop); True when it took over."""
    conn.settimeout(TIMEOUT)
    try:
        if conn.recv(64).strip() != b"handoff":
            return False
        socket.send_fds(conn, [f"ok {os.getpid()}\n".encode()], [listening.fileno()])
        conn.settimeout(None if TIMEOUT is None else 60.0)
        if conn.recv(64).strip() != b"release":
            return False  # it went away without taking over: keep serving
        stop_accepting()
        conn.sendall(b"bye\n")
        return True
    except OSError:
        return False
    finally:
        conn.close()
