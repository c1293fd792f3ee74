"""SSH addresses as people type them: one reading for `--host` (deploy, gc, host prepare) and a
fleet's `host:`.

    HOST   USER@HOST   HOST:PORT   USER@HOST:PORT   [IPv6]:PORT   IPv6   ssh://USER@HOST:PORT

HOST is an IP address or a DNS name. Anything else is refused before a connection is tried: a
mistyped address used to go to the resolver as one name and be retried for the whole connect
budget (30 s) before "Name or service not known". A user or port written in the address and given
on its own as well (`--ssh-user`, `--ssh-port`, a fleet's `user:`/`port:`) must agree.
A leaf: no mur imports but the error type.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from mur.errors import MurError

FORMS = "HOST, USER@HOST, HOST:PORT or USER@HOST:PORT (ssh://USER@HOST:PORT, [IPv6]:PORT)"
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\.?$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def split_address(text: str) -> tuple[str, str | None, int | None]:
    """(host, user or None, port or None) of an SSH address; ValueError saying what is wrong."""
    text = text.strip()
    if text.lower().startswith("ssh://"):
        return _from_url(text)
    if "://" in text:
        raise ValueError("only an ssh:// URL names an SSH target")
    user, at, hostport = text.rpartition("@")
    if at and not user:
        raise ValueError("empty user before '@'")
    host, port = _host_port(hostport)
    return _host(host), (_user(user) if at else None), port


def _from_url(text: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(text)
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.password is not None:
        raise ValueError("an ssh:// address is ssh://USER@HOST:PORT, nothing more")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the port is not a number from 1 to 65535") from None
    if port == 0:
        raise ValueError("the port is not a number from 1 to 65535")
    user = _user(parts.username) if parts.username is not None else None
    return _host(parts.hostname or ""), user, port


def _host_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, close, rest = text[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise ValueError("a bracketed IPv6 address is [ADDRESS] or [ADDRESS]:PORT")
        if not _is_ip(host, 6):
            raise ValueError(f"'{host}' is not an IPv6 address")
        return host, (_port(rest[1:]) if rest else None)
    if text.count(":") > 1:  # a bare IPv6 address: its colons are not a port
        if not _is_ip(text, 6):
            raise ValueError(f"'{text}' is not an IPv6 address (with a port: [ADDRESS]:PORT)")
        return text, None
    host, colon, port = text.partition(":")
    return host, (_port(port) if colon else None)


def _port(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise ValueError(f"the port '{text}' is not a number from 1 to 65535")
    return int(text)


def _user(text: str) -> str:
    if not _USER.match(text):
        raise ValueError(f"'{text}' is not a user name")
    return text


def _host(text: str) -> str:
    if not text:
        raise ValueError("no host")
    if _is_ip(text, 4) or _is_ip(text, 6):
        return text
    if _NAME.match(text) and len(text.rstrip(".")) <= 253:
        if text.rstrip(".").rpartition(".")[2].isdigit():  # 300.1.1.1: a mistyped address, not a name
            raise ValueError(f"'{text}' is not an IP address")
        return text
    raise ValueError(f"'{text}' is neither an IP address nor a host name")


def _is_ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def ssh_coordinates(text: str, user: str | None, port: int | None, *, where: str = "--host",
                    code: str = "E-DEPLOY-001") -> tuple[str, str, int]:
    """(host, user, port) of `text`, with `user`/`port` given apart (None: not given; then root, 22).
    MurError(`code`) when the address does not parse or says something else than they do."""
    try:
        host, own_user, own_port = split_address(text)
    except ValueError as exc:
        raise MurError(code, f"{where} '{text}': {exc}", f"write the SSH target as {FORMS}") from None
    if own_user is not None and user is not None and own_user != user:
        raise MurError(code, f"{where} '{text}' names user '{own_user}' but the SSH user is '{user}'",
                       "give the user once: in the address or as the SSH user")
    if own_port is not None and port is not None and own_port != port:
        raise MurError(code, f"{where} '{text}' names port {own_port} but the SSH port is {port}",
                       "give the port once: in the address or as the SSH port")
    return host, own_user or user or "root", own_port or port or 22
