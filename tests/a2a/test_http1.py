"""mur/a2a/http1.py on its own: h11 on asyncio serving small ASGI-shaped apps over real sockets.

The door's routes and limits are tested through the door (test_a2a_protocol.py,
test_a2a_hostile_door.py); these are the connection loop's own duties: 100-continue, HEAD,
flow control past the read buffer, an app that fails, and stopping with clients still attached.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from mur.a2a.http1 import HIGH_WATER, Headers, Response
from mur.a2a.listen import DoorLimits, bind_socket
from mur.a2a.server import ServerThread
from mur.testing.sockets import read_all


async def _body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError
        chunks.append(message["body"])
        if not message["more_body"]:
            return b"".join(chunks)


async def echo_length(scope, receive, send):
    """Answers ``<method> <path> <body length>``; ``/boom`` fails before answering, ``/half`` midway,
    ``/after`` once its answer is out."""
    if scope["path"] == "/boom":
        raise RuntimeError("a bug")
    body = await _body(receive)
    if scope["path"] == "/half":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("a bug midway")
    await Response(f"{scope['method']} {scope['path']} {len(body)}", media_type="text/plain")(scope, receive, send)
    if scope["path"] == "/after":
        raise RuntimeError("a bug once the answer is out")


async def forever(scope, receive, send):
    """A stream that never ends on its own."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    while True:
        await send({"type": "http.response.body", "body": b": beat\n\n", "more_body": True})
        await asyncio.sleep(0.05)


@pytest.fixture
def door():
    servers = []

    def start(app, limits: DoorLimits | None = None) -> int:
        sock = bind_socket("127.0.0.1", 0)
        server = ServerThread(app, sock, limits or DoorLimits(head_timeout=5, keep_alive=5))
        server.start()
        servers.append(server)
        return sock.getsockname()[1]

    start.servers = servers
    yield start
    for server in servers:
        server.stop()


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(5)
    return sock


def ask(port: int, raw: bytes) -> bytes:
    """Everything the door answers to ``raw`` on a new connection, until it closes it."""
    sock = connect(port)
    sock.sendall(raw)
    return read_all(sock)


def test_a_client_that_expects_100_continue_gets_it_then_the_answer(door):
    sock = connect(door(echo_length))
    sock.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\nconnection: close\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n")
    sock.sendall(b"hello")
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"POST /x 5")
    assert b"content-type: text/plain; charset=utf-8\r\n" in answer and b"\r\ndate: " in answer


def test_head_gets_the_head_without_the_body_and_the_connection_serves_on(door):
    answer = ask(door(echo_length), b"HEAD /x HTTP/1.1\r\nhost: x\r\n\r\nGET /y HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    head, rest = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and b"content-length: 9" in head  # "HEAD /x 0", headers only
    assert rest.startswith(b"HTTP/1.1 200") and rest.endswith(b"GET /y 0")


def test_a_body_past_the_read_buffer_arrives_whole(door):
    port = door(echo_length)
    size = 6 * HIGH_WATER + 17
    sock = connect(port)
    sock.sendall(b"POST /big HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
    sent = 0
    while sent < size:
        part = min(7000, size - sent)
        sock.sendall(b"%x\r\n" % part + b"z" * part + b"\r\n")
        sent += part
    sock.sendall(b"0\r\n\r\n")
    assert read_all(sock).endswith(f"POST /big {size}".encode())


def test_an_app_that_fails_gets_500_before_answering_and_a_cut_connection_after(door):
    port = door(echo_length)
    assert ask(port, b"GET /boom HTTP/1.1\r\nhost: x\r\n\r\n").startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    answer = ask(port, b"GET /half HTTP/1.1\r\nhost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200") and not answer.endswith(b"0\r\n\r\n")  # the chunked body never ends
    # a failure after a whole answer costs the connection nothing
    answer = ask(port, b"GET /after HTTP/1.1\r\nhost: x\r\n\r\nGET /fine HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert answer.count(b"HTTP/1.1 200 OK") == 2 and answer.endswith(b"GET /fine 0")


def test_stopping_ends_streams_and_idle_and_half_sent_connections_within_the_grace(door):
    port = door(forever)
    stream = connect(port)
    stream.sendall(b"GET /s HTTP/1.1\r\nhost: x\r\n\r\n")
    assert stream.recv(4096).startswith(b"HTTP/1.1 200")
    idle, half = connect(port), connect(port)
    half.sendall(b"GET /h HTTP/1.1\r\nhost: x\r\nx-slow: ")
    time.sleep(0.2)
    started = time.monotonic()
    door.servers[0].stop()
    assert time.monotonic() - started < ServerThread.GRACE + 2
    for sock in (stream, idle, half):
        read_all(sock)  # each ends: EOF or a reset, never a hang (the socket timeout is 5 s)
    with pytest.raises(OSError):
        connect(port)


def test_headers_give_the_first_value_of_a_name_whatever_its_case():
    headers = Headers([(b"X-One", b"a"), (b"x-one", b"b"), (b"host", b"h\xe9")])
    assert headers.get("x-ONE") == "a" and "X-One" in headers and headers.get("host") == "h\xe9"
    assert headers.get("absent", "d") == "d" and 3 not in headers


def test_a_target_with_bytes_past_ascii_gets_400_not_a_reset_and_escapes_are_decoded(door):
    port = door(echo_length)
    assert ask(port, b"GET /caf\xe9?q=\xff HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").startswith(
        b"HTTP/1.1 400 Bad Request\r\n")
    assert ask(port, b"GET /caf%C3%A9?q=%FF HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").endswith(
        "GET /caf\xe9 0".encode())


def test_a_stream_whose_client_went_away_ends_at_its_next_write(door):
    """An app that streams without watching `receive` learns the client is gone from `send`
    (OSError, as ASGI asks): before, `send` returned quietly and such a stream wrote into nothing
    for as long as its frames came."""
    ended: list[BaseException] = []

    async def stream(scope, receive, send):
        try:
            await forever(scope, receive, send)
        except BaseException as exc:
            ended.append(exc)
            raise

    port = door(stream)
    sock = connect(port)
    sock.sendall(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    sock.close()
    deadline = time.monotonic() + 5
    while not ended and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ended and isinstance(ended[0], OSError)
