"""What the egress proxy reads from a tool, parsed once and strictly (pure; no sockets).

A hostile tool chooses every byte, and whatever the proxy lets through is read again by an upstream
server that may be more lenient than we are. So each grammar here is the narrow one: a request line
is ``token SP target SP HTTP/1.0|1.1``; header lines end in CRLF and hold no other control byte (a
bare LF or CR, a NUL, an obs-fold continuation are refused, not repaired); a host is ASCII
letters, digits, ``-``, ``_`` and dots, or an IP literal, in one canonical spelling (lower case, IPs
as ``ipaddress`` prints them, no trailing dot) that both the allow-list check and the connect use;
a body is framed by one Content-Length or by ``Transfer-Encoding: chunked``, never both.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import struct
from typing import Iterable

from mur.digits import is_digits
from mur.hostnames import normalize_host, url_host

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE = re.compile(rb"^(" + _TOKEN + rb") ([\x21-\x7e]+) (HTTP/1\.[01])$")
_HEADER_LINE = re.compile(rb"^(" + _TOKEN + rb"):[ \t]*([\x20-\x7e\x80-\xff\t]*?)[ \t]*$")
_NAME = re.compile(r"^[a-z0-9_-]{1,63}(\.[a-z0-9_-]{1,63})*$")
# a tunnel's first bytes that must then parse as HTTP: a method, or any first line naming HTTP/
LOOKS_LIKE_HTTP = re.compile(rb"^(?:[A-Z]{3,10} |[^\r\n]* HTTP/)")
_CHUNK_SIZE = re.compile(rb"^([0-9a-fA-F]{1,8})(;[\x20-\x7e\t]*)?\r\n$")


def split_authority(text: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port`` / ``[v6]:port`` -> (canonical host, port); ValueError when malformed."""
    if "@" in text or not text:
        raise ValueError("no user info or empty authority")
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise ValueError("bad IPv6 authority")
        host_part, rest = text[: close + 1], text[close + 1:]
    elif text.count(":") == 1:
        host_part, port_text = text.split(":")
        rest = ":" + port_text
    elif ":" in text:
        raise ValueError("an IPv6 address needs brackets")
    else:
        host_part, rest = text, ""
    if rest and (not rest.startswith(":") or rest == ":"):
        raise ValueError("bad authority")
    port_text = rest[1:]
    if port_text:
        if not (is_digits(port_text)) or not 0 < int(port_text) < 65536:
            raise ValueError("bad port")
        port = int(port_text)
    elif default_port is not None:
        port = default_port
    else:
        raise ValueError("a port is required")
    return canonical_host(host_part), port


def canonical_host(text: str) -> str:
    """The one spelling of a host the proxy checks and dials (ValueError for anything else: IDN in
    Unicode, percent-escapes, empty labels...). ``Example.COM.`` -> ``example.com``, ``0x7f.1`` ->
    ``127.0.0.1``, ``[::ffff:127.0.0.1]`` -> ``::ffff:7f00:1``."""
    host = url_host(text)
    if is_ip(host):
        return host
    host = host[:-1] if host.endswith(".") else host
    if not _NAME.match(host) or len(host) > 253:
        raise ValueError(f"not a host name: {text!r}")
    return host


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """(method, target, version, headers) of an HTTP/1.x request head without its final CRLFCRLF
    (ValueError if it is not exactly the grammar above)."""
    lines = head.split(b"\r\n")
    if any(b"\r" in line or b"\n" in line for line in lines):
        raise ValueError("a bare CR or LF in the request head")
    if lines and lines[-1] == b"":
        lines.pop()
    match = _REQUEST_LINE.match(lines[0]) if lines else None
    if match is None:
        raise ValueError("bad request line")
    headers = []
    for line in lines[1:]:
        found = _HEADER_LINE.match(line)
        if found is None:
            raise ValueError("bad header line (folded, control byte, or not name: value)")
        headers.append((found.group(1).decode("ascii"), found.group(2).decode("latin-1")))
    method, target, version = (g.decode("ascii") for g in match.groups())
    return method, target, version, headers


def header(headers: Iterable[tuple[str, str]], name: str) -> list[str]:
    return [v for k, v in headers if k.lower() == name]


def body_framing(headers: list[tuple[str, str]]) -> int | None:
    """The request body's length, or None for chunked (ValueError when the framing is ambiguous:
    Content-Length with Transfer-Encoding, two different lengths, a coding other than chunked)."""
    lengths = {v for v in header(headers, "content-length")}
    codings = header(headers, "transfer-encoding")
    if codings:
        if lengths:
            raise ValueError("both Content-Length and Transfer-Encoding")
        if [c.lower() for c in codings] != ["chunked"]:
            raise ValueError("a Transfer-Encoding other than chunked")
        return None
    if not lengths:
        return 0
    if len(lengths) > 1 or not all(is_digits(v) and len(v) < 19 for v in lengths):
        raise ValueError("a bad or repeated Content-Length")
    return int(lengths.pop())


def chunk_size(line: bytes) -> int:
    """The size on a chunked body's size line (with its CRLF); ValueError when malformed."""
    match = _CHUNK_SIZE.match(line)
    if match is None:
        raise ValueError("bad chunk size line")
    return int(match.group(1), 16)


def tls_record_length(data: bytes) -> int | None:
    """Total bytes of the first TLS record when ``data`` starts with a handshake record header."""
    if len(data) < 5 or data[0] != 0x16 or data[1] != 0x03:
        return None
    return 5 + struct.unpack_from("!H", data, 3)[0]


def client_hello_sni(record: bytes) -> str | None:
    """The server_name in a TLS ClientHello record (None when absent; ValueError when malformed)."""
    try:
        if record[5] != 0x01:  # handshake type ClientHello
            raise ValueError("not a ClientHello")
        pos = 5 + 4 + 2 + 32  # handshake header, client_version, random
        pos += 1 + record[pos]  # session id
        pos += 2 + struct.unpack_from("!H", record, pos)[0]  # cipher suites
        pos += 1 + record[pos]  # compression methods
        if pos == len(record):
            return None
        end = pos + 2 + struct.unpack_from("!H", record, pos)[0]
        pos += 2
        while pos + 4 <= end:
            kind, size = struct.unpack_from("!HH", record, pos)
            pos += 4
            if kind == 0:  # server_name: list length, then (type, length, name) entries
                list_end = pos + 2 + struct.unpack_from("!H", record, pos)[0]
                item = pos + 2
                while item + 3 <= list_end:
                    name_type, name_len = record[item], struct.unpack_from("!H", record, item + 1)[0]
                    if name_type == 0:
                        return record[item + 3: item + 3 + name_len].decode("ascii")
                    item += 3 + name_len
                return None
            pos += size
        return None
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise ValueError(f"malformed ClientHello: {exc}") from exc


def same_host(a: str, b: str) -> bool:
    try:
        return normalize_host(a) == normalize_host(b)
    except ValueError:
        return False


def is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return True
    except OSError:
        return False


def address_scope(address: str) -> str:
    """"loopback", "link-local", "private", "reserved" or "global" (an IPv4-mapped IPv6 as its IPv4)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "reserved"
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_unspecified or ip.is_multicast or ip.is_reserved:
        return "reserved"
    return "private" if ip.is_private else "global"
