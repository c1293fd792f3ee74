"""The door's HTTP/1.1: h11's parser on an asyncio event loop, with the limits a hostile client needs.

The door (mur/a2a/server.py) is one ASGI-shaped callable, ``app(scope, receive, send)``; this module
serves it on one connection at a time per :class:`Connection`. It was served by uvicorn, with
starlette's request and response objects: at a capsule's first client (a deploy's health check is
one) those imported click, multiprocessing, anyio and machinery the door never used, ~4.7 MB of
private memory kept by every idle capsule (issue 31: an idle capsule's whole budget is 25 MB).
h11 stays: the well-kept part, which parses and frames requests and decides keep-alive. What is
here is the loop around it, and the limits uvicorn did not have:

* a deadline for the request head: ``head_timeout`` seconds from accept, or from the end of the
  previous response, to a complete request line and headers, however the bytes trickle in; then
  ``408`` and close. A kept-alive connection that sends nothing closes after ``keep_alive``;
* a cap on open connections: at ``max_connections`` a new connection first evicts the oldest one
  that is not being answered (idle, still sending its head, or still sending its body) and has
  been open at least ``EVICT_AFTER``; with none such it is let in over the cap, up to twice the
  cap, past which it gets ``503`` and is closed. A flood of idle or slow connections therefore
  cannot lock out a client that sends a request promptly;
* a write-stall deadline: a connection whose client reads nothing while output is queued (the
  socket buffers are full) for ``stall_timeout`` seconds is aborted. This ends an SSE client that
  never reads;
* a request body is buffered up to ``HIGH_WATER`` bytes before the socket stops being read until
  the door asks for it.

A head h11 cannot parse (garbage, conflicting or bad lengths, an unknown transfer coding, a head
past h11's 16 KiB) gets ``400`` and the connection closes: nothing after it is read as a request.
An app that fails before it answered gets ``500``; after, the connection closes. The body
deadline and the stream cap are the door's, which answers them with JSON-RPC errors. All numbers:
:class:`mur.a2a.listen.DoorLimits`.
"""

from __future__ import annotations

import asyncio
import time
from http import HTTPStatus
from urllib.parse import unquote

import h11

from mur.a2a.listen import DoorLimits

EVICT_AFTER = 1.0  # seconds a connection must have been open before the cap may evict it
HIGH_WATER = 64 * 1024  # request body bytes buffered before reading pauses


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:  # a status of no standard name
        return b""


def _refusal(status: int, body: bytes = b"", extra: bytes = b"") -> bytes:
    """A complete response written outside h11 (no request is being answered), then close."""
    head = b"HTTP/1.1 %d %s\r\n" % (status, _phrase(status))
    kind = b"content-type: text/plain; charset=utf-8\r\n" if body else b""
    return head + kind + b"content-length: %d\r\n" % len(body) + extra + b"connection: close\r\n\r\n" + body


_REFUSALS = {
    400: _refusal(400, b"Invalid HTTP request received."),
    408: _refusal(408),
    500: _refusal(500, b"Internal Server Error"),
    503: _refusal(503, extra=b"retry-after: 1\r\n"),
}
_date = (0, b"")


def _http_date() -> bytes:
    """The Date header's value, made once a second."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)).encode())
    return _date[1]


class Headers:
    """A request's headers, names lower-case: the first value of each (latin-1, as sent)."""

    __slots__ = ("_first",)

    def __init__(self, raw: list[tuple[bytes, bytes]]):
        first: dict[str, str] = {}
        for name, value in raw:
            first.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
        self._first = first

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first


class Request:
    """What the door reads of a request: its scope, method and headers (the body comes by receive)."""

    __slots__ = ("scope", "method", "headers")

    def __init__(self, scope: dict):
        self.scope = scope
        self.method = scope["method"]
        self.headers = Headers(scope["headers"])


class Response:
    """A whole answer: ``content`` (str as UTF-8), its status and headers; content-length is set,
    and content-type from ``media_type`` (``text/*`` with ``; charset=utf-8``)."""

    __slots__ = ("status_code", "body", "raw_headers")

    def __init__(self, content: bytes | str = b"", status_code: int = 200, media_type: str | None = None, headers: dict | None = None):
        self.status_code = status_code
        self.body = content.encode("utf-8") if isinstance(content, str) else content
        raw = [(b"content-length", str(len(self.body)).encode())]
        if media_type is not None:
            kind = f"{media_type}; charset=utf-8" if media_type.startswith("text/") else media_type
            raw.append((b"content-type", kind.encode("latin-1")))
        for name, value in (headers or {}).items():
            raw.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        self.raw_headers = raw

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.body})


class Connection(asyncio.Protocol):
    """One client connection: h11's state, the request being answered (a :class:`_Cycle`) and the
    timers. ``live`` is the server's set of open connections (the cap counts it); ``tasks`` keeps
    the running request tasks."""

    def __init__(self, app, limits: DoorLimits, live: set, tasks: set, scheme: str):
        self.app = app
        self.limits = limits
        self.live = live
        self.tasks = tasks
        self.scheme = scheme
        self.h11 = h11.Connection(h11.SERVER)
        self.loop = asyncio.get_running_loop()
        self.opened = time.monotonic()
        self.transport: asyncio.Transport | None = None
        self.cycle: _Cycle | None = None
        self.closing = False  # the server is stopping: close once the answer in flight is sent
        self._head: asyncio.TimerHandle | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None
        self._reading = True
        self.writable = asyncio.Event()
        self.writable.set()

    # --- accept and close ---------------------------------------------------------------------

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        # Closed connections stay in the set until connection_lost runs: count only the live ones.
        others = [c for c in self.live if not c.transport.is_closing()]
        self.live.add(self)
        if len(others) >= self.limits.max_connections:
            # Only a connection idle for EVICT_AFTER may go: a younger one may hold request bytes
            # not read yet (the loop accepts a burst before it reads), and closing it would reset
            # a client that did nothing wrong. Younger ones are let in over the cap, up to twice it.
            oldest = time.monotonic() - EVICT_AFTER
            idle = [c for c in others if not c.answering and c.opened <= oldest]
            if idle:
                min(idle, key=lambda c: c.opened).transport.close()
            elif len(others) >= 2 * self.limits.max_connections:
                self._refuse(503)
                return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self.live.discard(self)
        for timer in (self._head, self._idle, self._stall):
            if timer is not None:
                timer.cancel()
        self._head = self._idle = self._stall = None
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.wake()
        self.writable.set()  # a writer waiting for room learns the client is gone

    def shutdown(self) -> None:
        """The server stops: close now when nothing is being answered, else after the answer."""
        self.closing = True
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()

    @property
    def answering(self) -> bool:
        """Is the app working on a complete request (or streaming its answer) on this connection?"""
        cycle = self.cycle
        return cycle is not None and not cycle.response_complete and not cycle.more_body

    # --- reading ------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        self.h11.receive_data(data)
        self._handle_events()

    def _handle_events(self) -> None:
        while not self.transport.is_closing():
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError:
                self._bad_request()
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:  # a pipelined request waits for this answer to end
                self._pause_reading()
                return
            if isinstance(event, h11.ConnectionClosed):
                return
            if isinstance(event, h11.Request):
                self._begin(event)
            elif isinstance(event, h11.Data):
                cycle = self.cycle
                if cycle is None or cycle.response_complete:
                    continue  # the rest of a body the door answered without reading
                cycle.body += event.data
                if len(cycle.body) > HIGH_WATER:
                    self._pause_reading()
                cycle.wake()
            elif isinstance(event, h11.EndOfMessage):
                if self.h11.our_state is h11.DONE:  # answered before the body ended
                    self.h11.start_next_cycle()
                    self._resume_reading()
                    continue
                self.cycle.more_body = False
                self.cycle.wake()

    def _begin(self, event: h11.Request) -> None:
        if self._head is not None:
            self._head.cancel()
            self._head = None
        path, _, query = bytes(event.target).partition(b"?")
        scope = {
            "type": "http",
            "http_version": event.http_version.decode("ascii"),
            "method": event.method.decode("ascii"),
            "scheme": self.scheme,
            "path": unquote(path.decode("latin-1")),  # h11 refused non-ASCII; latin-1 cannot fail anyway
            "raw_path": path,
            "query_string": query,
            "headers": [(name.lower(), value) for name, value in event.headers],
        }
        self.cycle = _Cycle(self, scope, self.h11.client_is_waiting_for_100_continue)
        task = self.loop.create_task(self.cycle.run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if not self._reading:
            self._reading = True
            self.transport.resume_reading()

    # --- writing ------------------------------------------------------------------------------

    def write(self, *events, before: bytes = b"") -> None:
        """h11's bytes for ``events`` (after ``before``) in one write: one send, one packet."""
        data = before + b"".join(self.h11.send(event) or b"" for event in events)
        if data and not self.transport.is_closing():
            self.transport.write(data)

    def response_done(self) -> None:
        """The answer's last byte is queued: close, or wait for the next request."""
        if self.transport.is_closing():
            return
        if self.closing or self.h11.our_state is h11.MUST_CLOSE:
            self.transport.close()
            return
        self._idle = self.loop.call_later(self.limits.keep_alive, self._close_idle)
        self._await_head()
        self._resume_reading()
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            self._handle_events()  # a pipelined request already buffered

    def pause_writing(self) -> None:
        self.writable.clear()
        if self._stall is None:
            self._stall = self.loop.call_later(self.limits.stall_timeout, self.transport.abort)

    def resume_writing(self) -> None:
        self.writable.set()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    # --- deadlines and refusals ---------------------------------------------------------------

    def _await_head(self) -> None:
        if self._head is not None:
            self._head.cancel()
        self._head = None if self.transport.is_closing() else self.loop.call_later(self.limits.head_timeout, self._refuse, 408)

    def _close_idle(self) -> None:
        self._idle = None
        if not self.answering:
            self.transport.close()

    def _refuse(self, status: int) -> None:
        """Answer ``status`` outside the h11 state machine (no request is being answered) and close."""
        self._head = None
        if self.transport.is_closing() or self.answering:
            return
        self.transport.write(_REFUSALS[status])
        self.transport.close()

    def _bad_request(self) -> None:
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            self.transport.write(_REFUSALS[400])
        self.transport.close()


class ClientGone(ConnectionResetError):
    """An app sent to a client that has disconnected."""


class _Cycle:
    """One request and its answer: what the app's ``receive`` and ``send`` see."""

    def __init__(self, conn: Connection, scope: dict, expect_continue: bool):
        self.conn = conn
        self.scope = scope
        self.expect_continue = expect_continue
        self.body = b""
        self.more_body = True
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self._unsent = b""  # the response head, not written yet
        self._event = asyncio.Event()

    def wake(self) -> None:
        self._event.set()

    async def run(self) -> None:
        try:
            await self.conn.app(self.scope, self.receive, self.send)
        except BaseException:  # noqa: BLE001, S110 - a failed answer must not take the loop with it
            pass  # after a whole answer, nothing to mend (the connection may serve the next request)
        if not self.response_complete:
            self._abandon()

    def _abandon(self) -> None:
        """The app ended without a whole answer: 500 if nothing of one went out, and close."""
        transport = self.conn.transport
        if not self.disconnected and not transport.is_closing() and (not self.response_started or self._unsent):
            transport.write(_REFUSALS[500])
        transport.close()

    async def receive(self) -> dict:
        if self.expect_continue and not self.disconnected:
            self.expect_continue = False
            self.conn.write(h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue"))
        if not self.disconnected and not self.response_complete:
            self.conn._resume_reading()
            await self._event.wait()
            self._event.clear()
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        message = {"type": "http.request", "body": self.body, "more_body": self.more_body}
        self.body = b""
        return message

    async def send(self, message: dict) -> None:
        """As ASGI asks: OSError once the client is gone, so that an app writing a stream ends."""
        if self.disconnected:
            raise ClientGone("the client disconnected")
        conn = self.conn
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {message['type']}")
            self.response_started = True
            self.expect_continue = False
            headers = [(b"date", _http_date()), *message.get("headers", [])]
            status = message["status"]
            # Held until the first body part, to go out in the same write.
            self._unsent = conn.h11.send(h11.Response(status_code=status, headers=headers, reason=_phrase(status)))
            return
        if self.response_complete or message["type"] != "http.response.body":
            raise RuntimeError(f"unexpected {message['type']} after the response")
        if not conn.writable.is_set():
            await conn.writable.wait()
            if self.disconnected:
                raise ClientGone("the client disconnected")
        body = message.get("body", b"")
        events = [h11.Data(data=body)] if body and self.scope["method"] != "HEAD" else []
        head, self._unsent = self._unsent, b""
        if message.get("more_body", False):
            conn.write(*events, before=head)
            return
        self.response_complete = True
        self.wake()  # a receive() waiting for more learns the exchange is over
        conn.write(*events, h11.EndOfMessage(), before=head)
        conn.response_done()


async def serve(app, sock, limits: DoorLimits, ssl_context, stop: asyncio.Event, grace: float = 2.0, ready=None) -> None:
    """Serve ``app`` on the bound ``sock`` until ``stop`` is set (``ready()`` is called once it
    accepts); then stop accepting, let answers in flight finish for up to ``grace`` seconds and
    drop the rest."""
    loop = asyncio.get_running_loop()
    # Whatever a client makes asyncio report (a TLS handshake of garbage, a reset mid-write) is the
    # client's doing; it must not reach the capsule's stderr.
    loop.set_exception_handler(lambda loop, context: None)
    live: set[Connection] = set()
    tasks: set[asyncio.Task] = set()
    scheme = "https" if ssl_context is not None else "http"
    # A TLS client's handshake counts against the head deadline too: asyncio makes the connection
    # (and the cap sees it) only once the handshake is done, and would otherwise wait 60 s for it.
    handshake = limits.head_timeout if ssl_context is not None else None
    server = await loop.create_server(lambda: Connection(app, limits, live, tasks, scheme), sock=sock, ssl=ssl_context,
                                      ssl_handshake_timeout=handshake, backlog=2048)
    try:
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        server.close()
        for conn in list(live):
            conn.shutdown()
        deadline = loop.time() + grace
        while live and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(live):
            conn.transport.abort()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
