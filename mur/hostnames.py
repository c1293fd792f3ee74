"""Host names and IP literals as URL parsers read them (a leaf: the allow-list parser in
mur.manifest.network and the egress proxy in mur.sandbox both canonicalize hosts with these)."""

from __future__ import annotations

import ipaddress
import re

from mur.digits import is_digits

_FORBIDDEN_HOST_CHARS = frozenset(" \t\n\r#%/:<>?@[\\]^|")
_IPV4_PART = re.compile(r"^(?:0[xX][0-9a-fA-F]*|[0-9]+)$")


def _ipv4_number(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        if any(c not in "01234567" for c in part):
            raise ValueError("invalid IPv4 address")
        return int(part, 8)
    return int(part)


def ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP a URL host denotes, parsed as URL parsers (WHATWG, Rust's `url`) do — so `127.1`,
    `0x7f.0.0.1` and `2130706433` are all 127.0.0.1; None for a domain name; ValueError for a host
    that looks like an IP address but is not one."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("invalid IPv6 address") from None
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts = parts[:-1]
    if not _IPV4_PART.match(parts[-1]):
        return None  # does not end in a number: a domain
    if len(parts) > 4 or any(not _IPV4_PART.match(p) for p in parts):
        raise ValueError("invalid IPv4 address")
    numbers = [_ipv4_number(p) for p in parts]
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise ValueError("invalid IPv4 address")
    value = numbers[-1]
    for index, n in enumerate(numbers[:-1]):
        value += n << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def url_host(netloc: str) -> str:
    """The canonical host of a URL authority (`user@host:port`): lower-cased, IPs in canonical form.

    Raises ValueError with the URL parser's reason ("empty host", "invalid port number", ...).
    """
    hostport = netloc.rsplit("@", 1)[-1]
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            raise ValueError("invalid IPv6 address")
        host, rest = hostport[1:close], hostport[close + 1 :]
        ip = ip_literal(host if ":" in host else host + ":")  # brackets always mean IPv6
        if rest and not (rest.startswith(":") and valid_port_text(rest[1:])):
            raise ValueError("invalid port number")
        return str(ip)
    host, _, port = hostport.partition(":") if hostport.count(":") == 1 else (hostport, "", "")
    if hostport.count(":") > 1:
        raise ValueError("invalid port number")
    if port and not valid_port_text(port):
        raise ValueError("invalid port number")
    host = host.lower()
    if not host:
        raise ValueError("empty host")
    if any(c in _FORBIDDEN_HOST_CHARS or ord(c) < 0x20 or ord(c) == 0x7F for c in host):
        raise ValueError("invalid domain character")
    ip = ip_literal(host)
    return str(ip) if ip is not None else host


def valid_port_text(text: str) -> bool:
    return text == "" or (is_digits(text) and int(text) <= 65535)


def normalize_host(host: str) -> str:
    """Lower-case a host, strip IPv6 brackets, canonicalize IP literals and drop a trailing dot."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        ip = ip_literal(host)
    except ValueError:
        return host  # valid_host refuses it
    return str(ip) if ip is not None else host.rstrip(".")
