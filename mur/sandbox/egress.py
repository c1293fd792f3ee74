"""The egress proxy: the only way out of a session's network namespace, admitting allowed hosts only.

Tools see ``HTTP(S)_PROXY=http://127.0.0.1:3128``; the listening socket lives in the session's
network namespace (``namespaces.py`` creates it there), mur serves it from its own namespace and
opens the upstream connections itself. Nothing else in the namespace leads anywhere, so a tool
that ignores the proxy variables reaches nothing.

Per connection:

* ``CONNECT host:port`` -- refused (403) unless an allow entry could admit host:port. After the
  200, the tool's first bytes decide the protocol: a TLS ClientHello must name the same host in
  its SNI (a tunnel to an allowed CDN address cannot front another site), an HTTP request must
  carry that Host; either must be allowed for that scheme (``https://`` / ``http://`` entries), and
  anything else only by an entry that pins no scheme.
* ``GET http://host[:port]/path`` (absolute form) -- the same check for scheme http, the Host
  header must agree, and the request goes upstream in origin form with ``Connection: close``.

Host names are resolved here, by mur, at connect time (the injected ``resolve`` in tests); a name
whose address moved into a scope it did not have at launch (a public name now answering loopback or
link-local: DNS rebinding) is refused. The decisions are ``policy.egress_allowed`` / ``egress_target_allowed``; this module only parses and
relays. One asyncio loop in one thread per session; at most ``max_connections`` at a time.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import struct
import threading
from collections import deque
from typing import Callable, Iterable

from mur.hostnames import normalize_host, url_host
from mur.sandbox.policy import egress_allowed, egress_target_allowed

HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
CHUNK = 64 * 1024
TLS_RECORD_LIMIT = 5 + 16 * 1024 + 2048  # one TLS plaintext record, with slack for the header
LOG_LINES = 200  # per session, so a tool cannot flood the runtime log through us
_REQUEST_LINE = re.compile(rb"^([A-Z]{3,10}) (\S+) HTTP/1\.[01]\r\n")


class Refused(Exception):
    """Why a connection was refused (the text goes into the 403 body and the log)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


# --- parsing (pure) ---------------------------------------------------------------------------


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
        if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
            raise ValueError("bad port")
        port = int(port_text)
    elif default_port is not None:
        port = default_port
    else:
        raise ValueError("a port is required")
    return url_host(host_part), port


def parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    """(method, target, version, headers) of an HTTP/1.x request head (ValueError if malformed)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("bad request line")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ValueError("bad header line")
        headers.append((name, value.strip()))
    return parts[0], parts[1], parts[2], headers


def header(headers: Iterable[tuple[str, str]], name: str) -> list[str]:
    return [v for k, v in headers if k.lower() == name]


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


# --- the proxy --------------------------------------------------------------------------------


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


def _response(status: int, reason: str) -> bytes:
    text = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway", 504: "Gateway Timeout"}.get(status, "Error")
    body = f"mur egress proxy: {reason}\n".encode()
    return (f"HTTP/1.1 {status} {text}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def system_resolve(host: str) -> list[str]:
    """The addresses ``host`` resolves to (getaddrinfo) right now; [] when it does not."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class EgressProxy:
    """Serve the session's proxy listener until ``close()``."""

    def __init__(self, listener: socket.socket, allow: Iterable[object], *,
                 resolve: Callable[[str], list[str]] | None = None, log: Callable[[str], None] | None = None,
                 max_connections: int = 64) -> None:
        self.listener = listener
        self.allow = tuple(allow)
        self.resolve = resolve or system_resolve
        self._log = log or (lambda _m: None)
        self.max_connections = max_connections
        self.decisions: deque[tuple[str, str]] = deque(maxlen=1000)  # (target, "allowed ..." | "refused ...")
        self._logged = 0
        self._active = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="mur-egress", daemon=True)
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        # DNS rebinding: the address scopes each allowed name had at launch. The proxy runs in mur's
        # own network namespace, so a name that later resolves to loopback or link-local (the host's
        # own services, a cloud metadata endpoint) must not become a way there.
        self.launch_scopes: dict[str, set[str]] = {}

    def start(self) -> None:
        for entry in self.allow:
            host = getattr(entry, "host")
            if not is_ip(host) and host not in self.launch_scopes:
                self.launch_scopes[host] = {address_scope(a) for a in self.resolve(host)}
        self.listener.setblocking(False)
        self._thread.start()
        self._ready.wait(5)

    def close(self) -> None:
        """Stop serving and end every open connection (idempotent)."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(5)
        except Exception:  # a wedged loop must not keep the session from closing
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, sock=self.listener, limit=HEAD_LIMIT))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _note(self, target: str, verdict: str) -> None:
        self.decisions.append((target, verdict))
        if self._logged < LOG_LINES:
            self._logged += 1
            self._log(f"egress: {target}: {verdict}" if self._logged < LOG_LINES
                      else "egress: further decisions are not logged for this session")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._active >= self.max_connections:
            writer.transport.abort()
            return
        self._active += 1
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
                method, target, version, headers = parse_head(head[:-4])
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ValueError):
                raise Refused(400, "not an HTTP proxy request") from None
            if method == "CONNECT":
                upstream = await self._tunnel(reader, writer, target)
            else:
                upstream = await self._forward(reader, writer, method, target, version, headers)
        except Refused as exc:
            writer.write(_response(exc.status, str(exc)))
        except (ConnectionError, OSError):
            pass
        finally:
            self._active -= 1
            self._writers.discard(writer)
            for w in (writer, upstream):
                if w is not None:
                    try:
                        w.close()
                    except (ConnectionError, OSError, RuntimeError):
                        pass

    async def _open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            addresses = [host] if is_ip(host) else await self._loop.run_in_executor(None, self.resolve, host)
        except (OSError, UnicodeError):
            addresses = []
        if not addresses:
            raise Refused(502, f"{host} does not resolve")
        if not is_ip(host):
            known = self.launch_scopes.get(host, set()) | {"global"}
            kept = [a for a in addresses if address_scope(a) in known]
            if not kept:
                why = (f"{host} now resolves to {addresses[0]} ({address_scope(addresses[0])}), which it did not at "
                       "launch: DNS rebinding")
                self._note(f"{host}:{port}", f"refused ({why})")
                raise Refused(403, why)
            addresses = kept
        last: Exception | None = None
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port, limit=CHUNK), CONNECT_TIMEOUT)
            except (OSError, asyncio.TimeoutError) as exc:
                last = exc
        raise Refused(502, f"cannot connect to {host}:{port} ({last})")

    async def _tunnel(self, reader, writer, target: str):
        try:
            host, port = split_authority(target)
        except ValueError:
            raise Refused(400, f"bad CONNECT target {target!r}") from None
        name = f"CONNECT {host}:{port}"
        if not egress_target_allowed(self.allow, host, port):
            self._note(name, "refused (not in capabilities.network.allow)")
            raise Refused(403, f"{host}:{port} is not in capabilities.network.allow")
        up_reader, up_writer = await self._open(host, port)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        down = asyncio.ensure_future(_pipe(up_reader, writer))  # server-first protocols (ssh, smtp) flow at once
        try:
            first, protocol, named = await self._sniff(reader)
        except Refused as exc:
            self._note(name, f"refused ({exc})")
            down.cancel()
            return up_writer
        verdict = None
        if protocol is not None and named is None and not is_ip(host) and protocol == "https":
            verdict = "a TLS ClientHello without SNI to a named host"
        elif named is not None and not same_host(named, host):
            verdict = f"{'SNI' if protocol == 'https' else 'Host'} {named!r} differs from the CONNECT host"
        elif not egress_allowed(self.allow, host, port, protocol):
            verdict = f"{protocol or 'non-HTTP'} traffic to {host}:{port} is not in capabilities.network.allow"
        if verdict is not None:
            self._note(name, f"refused ({verdict})")
            down.cancel()
            return up_writer
        self._note(name, f"allowed ({protocol or 'opaque'})")
        if first:
            up_writer.write(first)
        await asyncio.gather(_pipe(reader, up_writer), down, return_exceptions=True)
        return up_writer

    async def _sniff(self, reader) -> tuple[bytes, str | None, str | None]:
        """(first bytes, "https" | "http" | None, SNI or Host host) of a tunnel's client side."""
        data = await reader.read(CHUNK)
        if not data:
            return b"", None, None
        try:
            if data[:2] == b"\x16\x03":
                while (total := tls_record_length(data)) is None or len(data) < min(total, TLS_RECORD_LIMIT):
                    more = await asyncio.wait_for(reader.read(CHUNK), HEAD_TIMEOUT)
                    if not more:
                        raise Refused(400, "truncated ClientHello")
                    data += more
                if total > TLS_RECORD_LIMIT:
                    raise Refused(400, "oversized ClientHello record")
                try:
                    return data, "https", client_hello_sni(data[:total])
                except ValueError as exc:
                    raise Refused(400, str(exc)) from None
            if _REQUEST_LINE.match(data):
                while b"\r\n\r\n" not in data:
                    if len(data) > HEAD_LIMIT:
                        raise Refused(400, "oversized request head")
                    more = await asyncio.wait_for(reader.read(CHUNK), HEAD_TIMEOUT)
                    if not more:
                        raise Refused(400, "truncated request head")
                    data += more
                try:
                    _m, _t, _v, headers = parse_head(data.split(b"\r\n\r\n", 1)[0])
                    hosts = header(headers, "host")
                    if len(hosts) != 1:
                        raise ValueError("exactly one Host header")
                    return data, "http", split_authority(hosts[0], default_port=0)[0]
                except ValueError as exc:
                    raise Refused(400, f"bad request in tunnel: {exc}") from None
        except asyncio.TimeoutError:
            raise Refused(400, "the first bytes did not arrive in time") from None
        return data, None, None

    async def _forward(self, reader, writer, method: str, target: str, version: str, headers):
        match = re.match(r"^http://([^/?#]+)([^#]*)$", target)
        if match is None:
            raise Refused(400, "only CONNECT and absolute http:// requests go through this proxy")
        try:
            host, port = split_authority(match.group(1), default_port=80)
        except ValueError:
            raise Refused(400, f"bad request target {target!r}") from None
        name = f"{method} http://{host}:{port}"
        hosts = header(headers, "host")
        if len(hosts) > 1 or (hosts and not _host_matches(hosts[0], host, port)):
            self._note(name, "refused (Host header differs from the request target)")
            raise Refused(403, "the Host header must name the request's host")
        if not egress_allowed(self.allow, host, port, "http"):
            self._note(name, "refused (not in capabilities.network.allow)")
            raise Refused(403, f"http://{host}:{port} is not in capabilities.network.allow")
        up_reader, up_writer = await self._open(host, port)
        self._note(name, "allowed (http)")
        hop = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te",
               "upgrade"}
        kept = [(k, v) for k, v in headers if k.lower() not in hop]
        if not hosts:
            kept.insert(0, ("Host", match.group(1)))
        path = match.group(2) or "/"
        out = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept) + "Connection: close\r\n\r\n"
        up_writer.write(out.encode("latin-1"))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer), return_exceptions=True)
        return up_writer


def _host_matches(value: str, host: str, port: int) -> bool:
    try:
        got_host, got_port = split_authority(value, default_port=80)
    except ValueError:
        return False
    return same_host(got_host, host) and got_port == port


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF, then half-close the other side (so request bodies and shutdown() work)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, RuntimeError):
        writer.transport.abort()
