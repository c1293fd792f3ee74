"""HTTP/1.1 framing for the front: heads, bodies (length or chunked), streamed relays.

Just enough of RFC 9112 for a reverse proxy in front of one kind of server (the A2A door): requests
are read whole (JSON-RPC bodies are small and routing needs them), responses are relayed as they
arrive (SSE streams are chunked and long-lived) or read whole when the front must look inside.
Ambiguous framing (both Content-Length and Transfer-Encoding, differing lengths) is refused, so a
request cannot mean one thing to the front and another to the backend.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from mur.digits import is_digits

MAX_HEAD = 64 * 1024
MAX_BODY = 8 * 1024 * 1024  # the door refuses past 1 MiB with its own JSON-RPC 413; the front lets it say so
# Hop-by-hop headers (RFC 9110 7.6.1): never forwarded as they came; the front sets its own framing.
HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
                 "expect", "content-length"})


class BadMessage(Exception):
    """The peer sent something that is not HTTP/1.1 the front can forward; `status` is the answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Head:
    first: str  # the request line or the status line
    headers: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        name = name.lower()
        found = [v for k, v in self.headers if k.lower() == name]
        return found[-1] if found else None

    def all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k.lower() == name]

    def tokens(self, name: str) -> set[str]:
        return {t.strip().lower() for v in self.all(name) for t in v.split(",") if t.strip()}

    @property
    def chunked(self) -> bool:
        return "chunked" in self.tokens("transfer-encoding")

    def length(self) -> int | None:
        """Content-Length, or None; BadMessage when it is malformed, repeated differently, or beside chunked."""
        values = {v.strip() for v in self.all("content-length")}
        if not values:
            return None
        if len(values) > 1 or self.all("transfer-encoding"):
            raise BadMessage("ambiguous message length")
        (value,) = values
        if not is_digits(value) or len(value) > 12:
            raise BadMessage(f"bad Content-Length {value[:20]!r}")
        return int(value)

    def forwarded(self, extra: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(k, v) for k, v in self.headers if k.lower() not in HOP] + extra


@dataclass(frozen=True)
class RequestLine:
    method: str
    target: str
    version: str

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


def parse_head(raw: bytes) -> Head:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise BadMessage("undecodable head") from exc
    lines = text.split("\r\n")
    first, rest = lines[0], [ln for ln in lines[1:] if ln]
    headers = []
    for line in rest:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or any(c in name for c in " \t"):
            raise BadMessage(f"bad header line {line[:60]!r}")
        headers.append((name, value.strip()))
    return Head(first, headers)


def request_line(head: Head) -> RequestLine:
    parts = head.first.split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadMessage(f"bad request line {head.first[:80]!r}")
    return RequestLine(*parts)


def status_of(head: Head) -> int:
    parts = head.first.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not is_digits(parts[1]):
        raise BadMessage(f"bad status line {head.first[:80]!r}", 502)
    return int(parts[1])


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next head, or None at a clean end of stream before its first byte."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise BadMessage("connection closed inside a head") from exc
    except asyncio.LimitOverrunError as exc:
        raise BadMessage("head too large", 431) from exc
    return parse_head(raw[:-4])


async def read_body(reader: asyncio.StreamReader, head: Head, limit: int = MAX_BODY,
                    until_close: bool = False) -> bytes:
    """The whole body (de-chunked); `until_close`: a response with neither length nor chunking."""
    length = head.length()
    if head.chunked:
        out = bytearray()
        await _chunks(reader, lambda data: _collect(out, data, limit))
        return bytes(out)
    if length is not None:
        if length > limit:
            raise BadMessage("body too large", 413)
        try:
            return await reader.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            raise BadMessage("connection closed inside a body") from exc
    if until_close:
        out = bytearray()
        while chunk := await reader.read(65536):
            await _collect(out, chunk, limit)
        return bytes(out)
    return b""


async def _collect(out: bytearray, data: bytes, limit: int) -> None:
    out += data
    if len(out) > limit:
        raise BadMessage("body too large", 413)


async def _chunks(reader: asyncio.StreamReader, sink: Callable[[bytes], Awaitable[None]]) -> None:
    """Feed each chunk's data to `sink` until the last chunk; trailers are read and dropped."""
    while True:
        try:
            line = await reader.readuntil(b"\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise BadMessage("broken chunked body") from exc
        size_text = line[:-2].split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError as exc:
            raise BadMessage("bad chunk size") from exc
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return
        try:
            data = await reader.readexactly(size + 2)
        except asyncio.IncompleteReadError as exc:
            raise BadMessage("connection closed inside a chunk") from exc
        await sink(data[:-2])


async def relay_body(reader: asyncio.StreamReader, head: Head, send: Callable[[bytes], Awaitable[None]],
                     status: int, method: str) -> bool:
    """Relay a response body to `send` as it arrives, keeping its framing; returns whether the
    connection it came in on ended cleanly at a message boundary (False: read to the close)."""
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return True
    if head.chunked:
        async def chunk(data: bytes) -> None:
            await send(b"%x\r\n%s\r\n" % (len(data), data))
        await _chunks(reader, chunk)
        await send(b"0\r\n\r\n")
        return True
    length = head.length()
    if length is not None:
        left = length
        while left:
            data = await reader.read(min(left, 65536))
            if not data:
                raise BadMessage("backend closed inside a body", 502)
            left -= len(data)
            await send(data)
        return True
    while data := await reader.read(65536):
        await send(data)
    return False


def render_head(first: str, headers: list[tuple[str, str]]) -> bytes:
    return (first + "\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n").encode("latin-1")


def simple_response(status: int, body: bytes, content_type: str = "application/json",
                    extra: list[tuple[str, str]] | None = None, close: bool = False) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 408: "Request Timeout", 413: "Payload Too Large",
              431: "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable",
              504: "Gateway Timeout"}.get(status, "Error")
    headers = [("content-type", content_type), ("content-length", str(len(body))), *(extra or [])]
    if close:
        headers.append(("connection", "close"))
    return render_head(f"HTTP/1.1 {status} {reason}", headers) + body
