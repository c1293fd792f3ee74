"""The egress proxy's byte movers: a tool's stream with sniffed bytes put back, bounded head reads,
one request body copied by its framing, and back-pressured copies with a shared idle clock.

Each read is bounded in size and time, so a hostile tool holds at most a chunk or two of mur's
memory per connection and no connection outlives ``Idle.seconds`` of silence in both directions.
"""

from __future__ import annotations

import asyncio

from mur.aio import wait_for
from mur.sandbox.egress_parse import chunk_size, parse_head

HEAD_LIMIT = 16 * 1024
CHUNK = 64 * 1024


class Refused(Exception):
    """Why a connection was refused (the text goes into the response body and the log)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class Idle:
    """Last activity on a connection, shared by both copy directions (a long download is not idle)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop, self.seconds, self.last = loop, seconds, loop.time()

    def touch(self) -> None:
        self.last = self.loop.time()

    async def read(self, reader: asyncio.StreamReader, size: int) -> bytes:
        while True:
            try:
                data = await wait_for(reader.read(size), self.seconds)
                self.touch()
                return data
            except asyncio.TimeoutError:
                if self.loop.time() - self.last >= self.seconds:
                    raise


class Feed:
    """The tool's side of a connection, with bytes already read (while sniffing) put back in front."""

    def __init__(self, reader: asyncio.StreamReader, idle: Idle, pending: bytes = b"") -> None:
        self.reader, self.idle, self.pending = reader, idle, pending

    async def some(self, size: int) -> bytes:
        if self.pending:
            data, self.pending = self.pending[:size], self.pending[size:]
            return data
        return await self.idle.read(self.reader, size)

    async def head(self, timeout: float, limit: int = HEAD_LIMIT) -> bytes:
        """Through the blank line ending a head: Refused 431 past ``limit``, 408 after ``timeout``,
        400 at EOF."""
        async def fill() -> bytes:
            while (end := self.pending.find(b"\r\n\r\n")) < 0:
                if len(self.pending) > limit:
                    raise Refused(431, f"request head over {limit} bytes")
                more = await self.reader.read(CHUNK)
                if not more:
                    raise Refused(400, "the request head ended early")
                self.pending += more
            if end + 4 > limit:
                raise Refused(431, f"request head over {limit} bytes")
            data, self.pending = self.pending[: end + 4], self.pending[end + 4:]
            return data
        try:
            data = await wait_for(fill(), timeout)
        except asyncio.TimeoutError:
            raise Refused(408, f"no complete request head within {timeout:g}s") from None
        self.idle.touch()
        return data

    async def line(self, limit: int = 4096) -> bytes:
        while (end := self.pending.find(b"\r\n")) < 0:
            if len(self.pending) > limit:
                raise Refused(400, "chunk line too long")
            more = await self.idle.read(self.reader, CHUNK)
            if not more:
                raise ConnectionError("the body ended early")
            self.pending += more
        data, self.pending = self.pending[: end + 2], self.pending[end + 2:]
        return data


async def relay_body(feed: Feed, writer: asyncio.StreamWriter, length: int | None) -> None:
    """Copy exactly one request body: ``length`` bytes, or chunked (None) through its last chunk."""
    async def copy(count: int) -> None:
        while count:
            data = await feed.some(min(CHUNK, count))
            if not data:
                raise ConnectionError("the body ended early")
            writer.write(data)
            await writer.drain()
            count -= len(data)
    if length is not None:
        await copy(length)
        return
    while True:
        line = await feed.line()
        try:
            size = chunk_size(line)
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        writer.write(line)
        if size == 0:
            while (trailer := await feed.line()) != b"\r\n":
                try:
                    parse_head(b"X / HTTP/1.1\r\n" + trailer[:-2])  # a trailer is a header line, as strict
                except ValueError as exc:
                    raise Refused(400, f"bad trailer: {exc}") from None
                writer.write(trailer)
            writer.write(b"\r\n")
            await writer.drain()
            return
        await copy(size)
        if await feed.line(limit=2) != b"\r\n":
            raise Refused(400, "a chunk longer than its size")
        writer.write(b"\r\n")


async def pipe(source, writer: asyncio.StreamWriter, idle: Idle) -> None:
    """Copy until EOF, then half-close the other side (so shutdown() works); back-pressured."""
    try:
        while data := (await source.some(CHUNK) if isinstance(source, Feed) else await idle.read(source, CHUNK)):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError, RuntimeError, asyncio.TimeoutError):
        writer.transport.abort()
