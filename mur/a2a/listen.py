"""The door's socket, bound before anything else starts, and a listener that loads the server only
when a client comes.

`mur run` binds its A2A port first (a taken ``network.internal_port`` is E-RUN-010 before anything
exists on disk) and prints the URL. Most `mur run --task` sessions never hear from a client, so the
HTTP server (mur.a2a.server: uvicorn, h11, asyncio, the JSON-RPC door) is not imported, let alone
started, until one does: :class:`LazyDoor` waits on the bound socket from a small thread and, at the
first pending connection, starts the real server on the same socket, which then accepts it (the
kernel queued it meanwhile). A session nobody called stops in a moment, with nothing to shut down.
A TLS door starts at once, so a bad certificate is reported before the session starts.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import select
import socket
import threading
from dataclasses import dataclass, fields
from typing import Any, Callable

from mur.errors import MurError


@dataclass(frozen=True)
class DoorLimits:
    """How much the door gives any one client. Each is overridable by the environment variable
    named in ``ENV`` (a non-number or a value <= 0 keeps the default)."""

    max_connections: int = 256  # open TCP connections
    head_timeout: float = 10.0  # seconds to send a complete request head
    body_timeout: float = 20.0  # seconds from the head to the complete body
    keep_alive: float = 5.0  # seconds an idle kept-alive connection stays open
    stall_timeout: float = 30.0  # seconds a client may leave queued output unread
    max_streams: int = 64  # SSE responses open at once (message/stream + stream/watch)

    ENV = {
        "max_connections": "MURMUR_A2A_MAX_CONNECTIONS",
        "head_timeout": "MURMUR_A2A_HEAD_TIMEOUT_SECS",
        "body_timeout": "MURMUR_A2A_BODY_TIMEOUT_SECS",
        "keep_alive": "MURMUR_A2A_KEEP_ALIVE_SECS",
        "stall_timeout": "MURMUR_A2A_STALL_TIMEOUT_SECS",
        "max_streams": "MURMUR_A2A_MAX_STREAMS",
    }

    @classmethod
    def from_env(cls, environ: dict | None = None) -> "DoorLimits":
        """The defaults with the ``MURMUR_A2A_*`` overrides of ``environ`` (os.environ by default)."""
        environ = os.environ if environ is None else environ
        values = {}
        for field in fields(cls):
            kind = int if field.type == "int" else float
            try:
                value = kind(environ.get(cls.ENV[field.name], "").strip())
            except ValueError:
                continue
            if value > 0:
                values[field.name] = value
        return cls(**values)


def bind_socket(bind: str, port: int | None, check: Callable[[str], None] | None = None) -> socket.socket:
    """A listening TCP socket on ``bind``:``port`` (0/None: OS-assigned); E-RUN-010 when taken.
    ``check(address)`` sees the resolved address first and may refuse it by raising."""
    try:
        infos = socket.getaddrinfo(bind, port or 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise MurError("E-IO-003", f"cannot resolve bind address {bind!r}: {exc}", hint="pass an IP address to --bind") from exc
    family, kind, proto, _, address = infos[0]
    if check is not None:
        check(address[0])
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY only on such sockets, and
    # without it every response pays Nagle + delayed ACK (~40 ms).
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE and port:
            raise MurError(
                "E-RUN-010",
                f"internal_port {port} is already bound",
                hint="stop the process listening on it, or set another network.internal_port",
            ) from exc
        raise MurError("E-IO-003", f"cannot bind {bind}:{port or 0}: {exc.strerror or exc}", hint="check --bind") from exc
    sock.set_inheritable(False)
    return sock


def capsule_url(bind: str, port: int, tls: bool = False) -> str:
    """``localhost:<port>`` for a loopback or wildcard bind (upstream's form), else ``host:port``;
    with TLS the same with ``https://`` in front (a client would otherwise assume http)."""
    scheme = "https://" if tls else ""
    try:
        ip = ipaddress.ip_address(bind)
    except ValueError:
        return f"{scheme}{bind}:{port}"
    if ip.is_loopback or ip.is_unspecified:
        return f"{scheme}localhost:{port}"
    return f"{scheme}[{bind}]:{port}" if ip.version == 6 else f"{scheme}{bind}:{port}"


class LazyDoor:
    """The server of `make()` (a mur.a2a.server.ServerThread, started), made and started only once
    the bound socket has a connection waiting; `start_now` makes it at once."""

    def __init__(self, sock: socket.socket, make: Callable[[], Any]):
        self._sock = sock
        self._make = make
        self._server: Any = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Wait for the first client on a daemon thread (returns at once)."""
        self._thread = threading.Thread(target=self._wait, name="mur-a2a-listen", daemon=True)
        self._thread.start()

    def start_now(self) -> None:
        """Make and start the server on this thread (its errors are raised here)."""
        with self._lock:
            if self._server is None:
                self._server = self._make()

    def _wait(self) -> None:
        try:
            ready, _, _ = select.select([self._sock, self._wake_r], [], [])
        except (OSError, ValueError):
            return
        if self._wake_r in ready:  # stopped before anyone called
            return
        try:
            self.start_now()
        except BaseException as exc:  # noqa: BLE001 - a client will see the connection refused/reset
            self._error = exc
            self._sock.close()

    def stop(self) -> None:
        """Stop the server if one started (else just the waiting thread), and close the socket."""
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass
        if self._thread is not None:
            self._thread.join(5.0)
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.stop()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self._sock.close()
        except OSError:
            pass
