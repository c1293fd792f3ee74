"""The egress proxy: the only way out of a session's network namespace, admitting allowed hosts only.

Tools see ``HTTP(S)_PROXY=http://127.0.0.1:3128``; the listening socket lives in the session's
network namespace (``namespaces.py`` creates it there), mur serves it from its own namespace and
opens the upstream connections itself. Nothing else in the namespace leads anywhere, so a tool
that ignores the proxy variables reaches nothing.

Per connection:

* ``CONNECT host:port`` -- refused (403) unless an allow entry could admit host:port. After the
  200, the tool's first bytes decide the protocol: a TLS ClientHello must name the same host in
  its SNI (a tunnel to an allowed CDN address cannot front another site); HTTP must parse, and
  every request on the tunnel (keep-alive, pipelined) must carry that Host and is relayed by its
  own framing, so a second request cannot hide in the first one's body; either must be allowed for
  that scheme (``https://`` / ``http://`` entries), and anything else only by an entry that pins
  no scheme.
* ``GET http://host[:port]/path`` (absolute form) -- the same check for scheme http, the Host
  header must agree, and exactly one request goes upstream in origin form with ``Connection:
  close``: its body as framed, nothing after it (a pipelined request is dropped, never sent).

Every byte is parsed once, strictly (``egress_parse``). The model is hostile, so the proxy is
bounded: ``max_connections`` at a time (more get a 503), a request head of at most ``HEAD_LIMIT``
bytes (431) within ``head_timeout`` seconds (slowloris: 408), an ``idle_timeout`` on every
connection, and back-pressure on every copy (no direction buffers more than a chunk or two).

Host names are resolved here, by mur, at connect time (the injected ``resolve`` in tests); a name
whose address moved into a scope it did not have at launch (a public name now answering loopback or
link-local: DNS rebinding) is refused. The decisions are ``policy.egress_allowed`` /
``egress_target_allowed``; this module only relays. One asyncio loop in one thread per session.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
from collections import deque
from typing import Callable, Iterable

from mur.aio import wait_for
from mur.sandbox.egress_parse import (LOOKS_LIKE_HTTP, address_scope, body_framing, chunk_size,  # noqa: F401
                                      client_hello_sni, header, is_ip, parse_head, same_host, split_authority,
                                      tls_record_length)
from mur.sandbox.egress_relay import CHUNK, HEAD_LIMIT, Feed, Idle, Refused, pipe, relay_body  # noqa: F401
from mur.sandbox.policy import egress_allowed, egress_target_allowed

HEAD_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0
CONNECT_TIMEOUT = 10.0
TLS_RECORD_LIMIT = 5 + 16 * 1024 + 2048  # one TLS plaintext record, with slack for the header
LOG_LINES = 200  # per session, so a tool cannot flood the runtime log through us
_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate", "te", "upgrade"}
_STATUS = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 431: "Request Header Fields Too Large",
           501: "Not Implemented", 502: "Bad Gateway", 503: "Service Unavailable"}


def _response(status: int, reason: str) -> bytes:
    body = f"mur egress proxy: {reason}\n".encode()
    return (f"HTTP/1.1 {status} {_STATUS.get(status, 'Error')}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
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
                 max_connections: int = 64, head_timeout: float = HEAD_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.listener = listener
        self.allow = tuple(allow)
        self.resolve = resolve or system_resolve
        self._log = log or (lambda _m: None)
        self.max_connections = max_connections
        self.head_timeout, self.idle_timeout = head_timeout, idle_timeout
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

    @property
    def active(self) -> int:
        """Connections being served right now."""
        return self._active

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
            asyncio.start_server(self._serve, sock=self.listener, limit=CHUNK))
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
            # the flood's own session pays: its extra connections are told so and closed at once
            writer.write(_response(503, f"more than {self.max_connections} connections at a time"))
            writer.close()
            return
        self._active += 1
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        idle = Idle(self._loop, self.idle_timeout)
        feed = Feed(reader, idle)
        try:
            head = await feed.head(self.head_timeout)
            try:
                method, target, version, headers = parse_head(head[:-4])
            except ValueError as exc:
                raise Refused(400, f"not an HTTP proxy request ({exc})") from None
            if method == "CONNECT":
                upstream = await self._tunnel(feed, writer, target, idle)
            else:
                upstream = await self._forward(feed, writer, method, target, version, headers, idle)
        except Refused as exc:
            writer.write(_response(exc.status, str(exc)))
        except (ConnectionError, OSError, asyncio.TimeoutError, ValueError):
            pass
        except asyncio.CancelledError:  # close(): end quietly (asyncio logs a cancelled handler task)
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
                return await wait_for(asyncio.open_connection(address, port, limit=CHUNK), CONNECT_TIMEOUT)
            except (OSError, asyncio.TimeoutError) as exc:
                last = exc
        raise Refused(502, f"cannot connect to {host}:{port} ({last})")

    async def _tunnel(self, feed: Feed, writer, target: str, idle: Idle):
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
        down = asyncio.ensure_future(pipe(up_reader, writer, idle))  # server-first protocols (ssh, smtp) flow at once
        try:
            protocol, named = await self._sniff(feed)
            verdict = None
            if protocol == "https" and named is None and not is_ip(host):
                verdict = "a TLS ClientHello without SNI to a named host"
            elif named is not None and not same_host(named, host):
                verdict = f"{'SNI' if protocol == 'https' else 'Host'} {named!r} differs from the CONNECT host"
            elif not egress_allowed(self.allow, host, port, protocol):
                verdict = f"{protocol or 'non-HTTP'} traffic to {host}:{port} is not in capabilities.network.allow"
            if verdict is not None:
                raise Refused(403, verdict)
            self._note(name, f"allowed ({protocol or 'opaque'})")
            if protocol == "http":
                await asyncio.gather(self._requests(feed, up_writer, host), down)
            else:
                await asyncio.gather(pipe(feed, up_writer, idle), down)
        except Refused as exc:  # the 200 is already out: the tool sees the tunnel close
            self._note(name, f"refused ({exc})")
        finally:
            down.cancel()
            up_writer.transport.abort()
        return up_writer

    async def _sniff(self, feed: Feed) -> tuple[str | None, str | None]:
        """("https" | "http" | None, SNI or Host host) of a tunnel's first bytes (left in ``feed``)."""
        data = await feed.some(CHUNK)
        feed.pending = data
        if not data:
            return None, None
        try:
            while _undecided(feed.pending):  # a ClientHello or request line dribbled out byte by byte
                more = await wait_for(feed.reader.read(CHUNK), self.head_timeout)
                if not more:
                    break
                feed.pending += more
            data = feed.pending
            if data[:2] == b"\x16\x03":
                while (total := tls_record_length(feed.pending)) is None or len(feed.pending) < min(total, TLS_RECORD_LIMIT):
                    more = await wait_for(feed.reader.read(CHUNK), self.head_timeout)
                    if not more:
                        raise Refused(400, "truncated ClientHello")
                    feed.pending += more
                if total > TLS_RECORD_LIMIT:
                    raise Refused(400, "oversized ClientHello record")
                try:
                    return "https", client_hello_sni(feed.pending[:total])
                except ValueError as exc:
                    raise Refused(400, str(exc)) from None
        except asyncio.TimeoutError:
            raise Refused(408, "the first bytes did not arrive in time") from None
        if LOOKS_LIKE_HTTP.match(data):
            head = await feed.head(self.head_timeout)
            feed.pending = head + feed.pending  # the requests loop reads it again
            return "http", _request_host(head)
        return None, None

    async def _requests(self, feed: Feed, up_writer: asyncio.StreamWriter, host: str) -> None:
        """Relay the tunnel's HTTP requests one by one, each checked, each body by its framing."""
        while True:
            try:
                head = await feed.head(self.idle_timeout)
            except Refused as exc:
                if exc.status == 400 and not feed.pending:
                    if up_writer.can_write_eof():
                        up_writer.write_eof()  # the tool is done (EOF between requests)
                    return
                raise
            named = _request_host(head)
            _m, _t, _v, headers = parse_head(head[:-4])
            if not same_host(named, host):
                raise Refused(403, f"a later request's Host {named!r} differs from the CONNECT host")
            if header(headers, "upgrade"):
                raise Refused(403, "a protocol upgrade inside a plain-HTTP tunnel (its bytes could not be checked)")
            up_writer.write(head)
            await up_writer.drain()
            await relay_body(feed, up_writer, _framing(headers))

    async def _forward(self, feed: Feed, writer, method: str, target: str, version: str, headers, idle: Idle):
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
        framing = _framing(headers)
        if header(headers, "upgrade"):
            raise Refused(403, "protocol upgrades do not go through this proxy")
        up_reader, up_writer = await self._open(host, port)
        self._note(name, "allowed (http)")
        kept = [(k, v) for k, v in headers if k.lower() not in _HOP]
        if not hosts:
            kept.insert(0, ("Host", match.group(1)))
        path = match.group(2) or "/"
        out = f"{method} {path} {version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in kept) + "Connection: close\r\n\r\n"
        up_writer.write(out.encode("latin-1"))
        down = asyncio.ensure_future(pipe(up_reader, writer, idle))  # a 100 Continue flows while the body does
        try:
            await relay_body(feed, up_writer, framing)
            await down  # anything the tool sends after this one request is never read, never sent
        finally:
            down.cancel()
        return up_writer


def _undecided(data: bytes) -> bool:
    """Too few bytes yet to tell TLS, HTTP and other protocols apart?"""
    if data[:1] == b"\x16":
        return len(data) < 5
    return len(data) < HEAD_LIMIT and b"\n" not in data and all(0x20 <= b < 0x7F for b in data)


def _request_host(head: bytes) -> str:
    """The one Host of a request in a tunnel (Refused 400 when the head is not strict HTTP)."""
    try:
        _m, _t, _v, headers = parse_head(head[:-4])
        hosts = header(headers, "host")
        if len(hosts) != 1:
            raise ValueError("exactly one Host header")
        _framing(headers)
        return split_authority(hosts[0], default_port=0)[0]
    except ValueError as exc:
        raise Refused(400, f"bad request in tunnel: {exc}") from None


def _framing(headers: list[tuple[str, str]]) -> int | None:
    try:
        return body_framing(headers)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None


def _host_matches(value: str, host: str, port: int) -> bool:
    try:
        got_host, got_port = split_authority(value, default_port=80)
    except ValueError:
        return False
    return same_host(got_host, host) and got_port == port


