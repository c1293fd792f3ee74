"""`capabilities.network.allow` entries: parsing, URL matching, and narrowing (declaration ∩ ceiling).

Three forms (spec, "Network allow entries"):
  * full URL ``https://api.example.com[:port]`` — that scheme, that host, that port (or the scheme's default);
  * bare host ``api.example.com`` — every scheme and every port;
  * host and port ``localhost:11434`` — every scheme, that port.
A URL with a path (other than ``/``), query, fragment or user info, and any scheme other than http/https,
is rejected. The check is a pattern match and never resolves DNS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from mur.digits import is_digits
from mur.errors import MurError
from mur.hostnames import ip_literal, normalize_host, url_host, valid_port_text  # noqa: F401 (re-exported)
from mur.manifest.yamlio import one_line

DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class AllowEntry:
    """One parsed allow entry; ``scheme``/``port`` are None when the entry does not pin them."""

    raw: str
    host: str
    scheme: str | None = None
    port: int | None = None

    def ports(self) -> int | None:
        """The single port this entry allows, or None for 'any port'."""
        if self.port is not None:
            return self.port
        if self.scheme is not None:
            return DEFAULT_PORTS[self.scheme]
        return None

    def matches(self, scheme: str, host: str, port: int) -> bool:
        """Does a request to scheme://host:port fall under this entry?"""
        if normalize_host(host) != self.host:
            return False
        if self.scheme is not None and scheme != self.scheme:
            return False
        want = self.ports()
        return want is None or want == port

    def covers(self, other: "AllowEntry") -> bool:
        """Is every request `other` allows also allowed by self? (used for narrowing)."""
        if other.host != self.host:
            return False
        if self.scheme is None and self.port is None:
            return True
        if self.scheme is None:  # host:port ceiling: other must pin exactly that port
            return other.ports() == self.port
        return other.scheme == self.scheme and other.ports() == self.ports()


def _bad(entry: str, reason: str) -> MurError:
    return MurError(
        "E-CAP-001",
        one_line(f"invalid network allow entry '{entry}': {reason}"),
        "use https://host[:port], host, or host:port (no path, query or fragment)",
    )


def _is_ip(host: str) -> bool:
    try:
        return ip_literal(host) is not None
    except ValueError:
        return False


def valid_host(host: str) -> bool:
    """A DNS name (letters, digits, '-', '_'), an IPv4 literal, or an (unbracketed) IPv6 literal."""
    if not host:
        return False
    try:
        if ip_literal(host) is not None:
            return True
    except ValueError:
        return False
    name = host.rstrip(".")
    if len(name) > 253 or not name:
        return False
    return all(_LABEL.match(label) for label in name.split("."))


def _port(entry: str, text: str) -> int:
    if not is_digits(text):
        raise _bad(entry, "invalid port number")
    port = int(text)
    if not 0 < port <= 65535:
        raise _bad(entry, "invalid port number")
    return port


def parse_allow_entry(entry: object) -> AllowEntry:
    """Parse one allow entry or raise E-CAP-001."""
    if not isinstance(entry, str):
        raise _bad(str(entry), "entry must be a string")
    raw = entry
    text = entry.strip()
    if not text:
        raise _bad(raw, "entry must not be empty")
    if any(c.isspace() for c in text):
        raise _bad(raw, "invalid host allow entry: entry contains whitespace")
    if "://" in text:
        try:
            parts = urlsplit(text)
            port_text = parts.netloc.rsplit(":", 1)[1] if _has_port(parts.netloc) else None
        except ValueError as exc:
            raise _bad(raw, f"invalid URL: {exc}") from exc
        scheme = parts.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise _bad(raw, f"unsupported URL scheme '{scheme}' (expected http or https)")
        if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in text or "#" in text:
            raise _bad(raw, "URL allow entries must not include path, query, or fragment")
        if "@" in parts.netloc:
            raise _bad(raw, "URL allow entries must not include user info")
        host = parts.hostname or ""
        if not host:
            raise _bad(raw, "URL allow entries must include a host")
        if not valid_host(normalize_host(host)):
            raise _bad(raw, f"invalid URL: '{host}' is not a valid host")
        port = _port(raw, port_text) if port_text is not None else None
        return AllowEntry(raw, normalize_host(host), scheme, port)
    if any(c in text for c in "/?#@"):
        raise _bad(raw, "host allow entries must be host or host:port only")
    host, port = text, None
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise _bad(raw, "invalid host allow entry: unterminated IPv6 literal")
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise _bad(raw, "host allow entries must be host or host:port only")
            port = _port(raw, rest[1:])
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = _port(raw, port_text)
    elif text.count(":") > 1 and not _is_ip(text):
        raise _bad(raw, "invalid host allow entry: not a valid host")
    host = normalize_host(host)
    if not host:
        raise _bad(raw, "host allow entries must include a host")
    if not valid_host(host):
        raise _bad(raw, f"invalid host allow entry: '{host}' is not a valid host")
    return AllowEntry(raw, host, None, port)


def _has_port(netloc: str) -> bool:
    hostpart = netloc.rsplit("@", 1)[-1]
    if hostpart.startswith("["):
        return "]:" in hostpart
    return ":" in hostpart


def parse_allow_list(entries: list[object]) -> list[AllowEntry]:
    """Parse every entry (E-CAP-001 on the first bad one)."""
    return [parse_allow_entry(e) for e in entries]


def url_allowed(entries: list[AllowEntry], url: str) -> bool:
    """Is an outbound request to `url` allowed by any entry? Never resolves DNS."""
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return False
    if scheme not in DEFAULT_PORTS or not host or port is None:
        return False
    return any(e.matches(scheme, host, port) for e in entries)


def narrow(declared: list[AllowEntry], ceiling: list[AllowEntry]) -> tuple[list[AllowEntry], list[AllowEntry]]:
    """Split a per-artifact declaration into (kept, dropped) against the capsule ceiling."""
    kept, dropped = [], []
    for entry in declared:
        (kept if any(c.covers(entry) for c in ceiling) else dropped).append(entry)
    return kept, dropped
