"""Keep-alive connections of a front that stops accepting (it hands its socket to a successor):
an answer that promised keep-alive is honoured, the next request on that connection is answered
(with `connection: close`), never reset. Real sockets on loopback, one event loop."""

from __future__ import annotations

import asyncio
import json
import time

from mur.front import http
from mur.front.config import Backend, FrontConfig
from mur.front.proxy import Front


def request(n: int) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "tasks/get", "params": {"id": "t1"}}).encode()
    return http.render_head("POST / HTTP/1.1", [("host", "front"), ("content-type", "application/json"),
                                                ("content-length", str(len(body)))]) + body


async def backend(started: asyncio.Event, release: asyncio.Event):  # noqa: ANN201
    """Answers every request once `release` is set (`started` tells a request arrived)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await http.read_head(reader)
        await http.read_body(reader, head)
        started.set()
        await release.wait()
        data = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"id": "t1", "status": {"state": "working"}}}).encode()
        writer.write(http.render_head("HTTP/1.1 200 OK", [("content-type", "application/json"),
                                                          ("content-length", str(len(data))), ("connection", "close")])
                     + data)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, str]:
    head = await asyncio.wait_for(http.read_head(reader), 10)
    assert head is not None, "the connection ended without an answer"
    await http.read_body(reader, head)
    return http.status_of(head), (head.get("connection") or "").lower()


def test_an_answer_promised_keep_alive_as_the_front_stops_accepting_keeps_the_connection():
    async def main() -> None:
        started, release = asyncio.Event(), asyncio.Event()
        back = await backend(started, release)
        front = Front(FrontConfig(listen_port=0, backends=(Backend("r1", back.sockets[0].getsockname()[1]),)))
        server = await asyncio.start_server(front.handle, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        try:
            writer.write(request(1))
            await asyncio.wait_for(started.wait(), 10)
            front.closing = time.monotonic()  # it hands its socket over while this request is under way
            release.set()
            assert await read_answer(reader) == (200, "keep-alive")  # decided before the front stopped
            await asyncio.sleep(0.3)  # the client sends its next request a moment later, as a poller does
            writer.write(request(2))
            assert await read_answer(reader) == (200, "close")
        finally:
            writer.close()
            server.close()
            back.close()

    asyncio.run(main())
