"""Authenticated A2A: the bearer token (file rules, constant-time check) and TLS for the door.

The contract (issue 13 part 7) in brief: ``mur run --a2a-token-file PATH`` (or
``MURMUR_A2A_TOKEN_FILE``) makes every request except ``GET /.well-known/agent-card.json`` need
``Authorization: Bearer <token>``; ``--tls-cert/--tls-key`` (or ``MURMUR_A2A_TLS_CERT/KEY``) make
the door speak HTTPS. A door off loopback without a token is refused. See docs/a2a.md, "Auth".
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from mur.errors import MurError

MAX_TOKEN_FILE = 4096
# RFC 6750 section 2.1 b64token: what a Bearer credential may hold.
_TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")

SECURITY_SCHEMES = {"bearer": {"type": "http", "scheme": "bearer"}}
SECURITY = [{"bearer": []}]


@dataclass(frozen=True)
class DoorAuth:
    """What the door asks of its callers: a bearer token, and TLS (certificate + key files)."""

    token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


def read_token_file(path: Path | str) -> str:
    """The token a file holds (whitespace stripped); E-A2A-003 unless it is a regular file that only
    its owner can read, holding one RFC 6750 token."""
    path = Path(path)

    def refused(why: str, hint: str = "write the token alone into a file only you can read: chmod 600 FILE") -> MurError:
        return MurError("E-A2A-003", f"token file {path}: {why}", hint=hint)

    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the open.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        raise refused(f"cannot open it: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise refused("not a regular file")
        if info.st_mode & 0o077:
            raise refused(
                f"mode {stat.S_IMODE(info.st_mode):04o} lets group or others read or write it",
                hint=f"chmod 600 {path}",
            )
        if info.st_size > MAX_TOKEN_FILE:
            raise refused(f"larger than {MAX_TOKEN_FILE} bytes; it should hold one token")
        raw = os.read(fd, MAX_TOKEN_FILE + 1)
    except OSError as exc:
        raise refused(f"cannot read it: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise refused("not ASCII text; a bearer token is letters, digits and -._~+/=") from exc
    if not token:
        raise refused("empty")
    if not _TOKEN.match(token):
        raise refused("holds more than one token, or characters a bearer token cannot have (-._~+/= and alphanumerics only)")
    return token


def bearer_matches(header: str | None, token: str) -> bool:
    """Does an ``Authorization`` header carry ``Bearer <token>``? The comparison takes the same time
    wherever the first difference is (hmac.compare_digest), so a caller cannot guess byte by byte;
    it compares SHA-256 digests, because compare_digest returns early on a length mismatch and
    would tell a caller the token's length."""
    if not header:
        return False
    scheme, _, credential = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    presented = hashlib.sha256(credential.strip().encode("utf-8", "replace")).digest()
    return hmac.compare_digest(presented, hashlib.sha256(token.encode("utf-8")).digest())


def token_in_query(query_string: bytes) -> bool:
    """Does a URL's query carry a bearer token (RFC 6750 section 2.3's ``access_token``)? The door
    refuses such a request even when its header is right: a URL ends up in logs and histories."""
    try:
        names = {k.strip().lower() for k, _ in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)}
    except ValueError:
        return False
    return bool(names & {"access_token", "token", "bearer"})


def tls_files(cert: Path | str | None, key: Path | str | None) -> tuple[Path, Path] | None:
    """The certificate and key files as a usable pair (None: no TLS); E-A2A-004 when they are not."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise MurError("E-A2A-004", "TLS needs both a certificate and its key", hint="pass --tls-cert FILE and --tls-key FILE")
    import ssl

    cert, key = Path(cert), Path(key)
    try:
        server_tls(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise MurError(
            "E-A2A-004",
            f"cannot use the TLS certificate {cert} with key {key}: {getattr(exc, 'strerror', None) or exc}",
            hint="both must be PEM files, the key unencrypted and matching the certificate",
        ) from exc
    return cert, key


def server_tls(cert: Path, key: Path):
    """The door's TLS context (no client certificates asked for); OSError or ssl.SSLError when the
    pair is unusable."""
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def load_door_auth(token_file: Path | str | None, tls_cert: Path | str | None, tls_key: Path | str | None) -> DoorAuth:
    """Read and check ``mur run``'s auth inputs before anything binds or is written."""
    token = read_token_file(token_file) if token_file else None
    pair = tls_files(tls_cert, tls_key)
    return DoorAuth(token, *(pair or (None, None)))


def require_token_off_loopback(address: str, auth: DoorAuth) -> None:
    """E-A2A-005 when the door would listen beyond loopback (a wildcard included) with no token."""
    if auth.token is not None:
        return
    try:
        loopback = ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise MurError(
            "E-A2A-005",
            f"refusing to serve A2A on {address} without authentication: anyone who reaches the port could run tasks",
            hint="pass --a2a-token-file FILE (or MURMUR_A2A_TOKEN_FILE), or bind 127.0.0.1 and reach it through a tunnel",
        )
