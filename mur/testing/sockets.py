"""Raw-socket helpers for tests that play a hostile client: read until the peer closes, and a real
TLS ClientHello (as Python's OpenSSL writes it) for a given SNI."""

from __future__ import annotations

import socket
import ssl


def read_all(sock: socket.socket, timeout: float = 5) -> bytes:
    """Everything the peer sends until it closes the connection (or ``timeout`` of silence)."""
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def client_hello(server_hostname: str | None) -> bytes:
    """The first flight of a TLS client naming ``server_hostname`` in its SNI (None: no SNI)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if server_hostname is None:
        ctx.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    try:
        conn.do_handshake()
    except ssl.SSLWantReadError:
        return outgoing.read()
    raise AssertionError("a TLS handshake completed without a server")
