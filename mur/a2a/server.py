"""The HTTP door: a small ASGI-shaped app, served by mur/a2a/http1.py (h11 on asyncio).

Routes (upstream section 6.1):

* ``GET /.well-known/agent-card.json`` -> the agent card (public even when a token is set);
* with a token set (mur/a2a/auth.py), anything else without ``Authorization: Bearer <token>``
  -> 401 carrying a JSON-RPC error; a token in the query string (``?access_token=``) -> 400;
* ``POST /`` with ``content-type: application/json`` -> JSON-RPC 2.0;
* ``POST /`` with another content type -> 415 (upstream answers 404; see docs/a2a.md);
* a body over ``MAX_BODY`` -> 413, one not complete within the body deadline -> 408, both carrying
  a JSON-RPC error and closing the connection;
* a stream (SSE) beyond the open-stream cap -> 503 carrying a JSON-RPC error;
* anything else -> 404.

The server runs on a background thread with its own event loop, on a socket bound by
mur.a2a.listen (so that a taken ``network.internal_port`` is reported as ``E-RUN-010`` before
anything else starts, and this module is imported only once a client comes). Its connections'
limits (head deadline, connection cap, write-stall deadline) are mur/a2a/http1.py's.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from typing import AsyncIterator

from mur import ids
from mur.a2a import protocol as rpc
from mur.a2a.auth import DoorAuth, bearer_matches, server_tls, token_in_query
from mur.a2a.http1 import Request, Response, serve
from mur.a2a.listen import DoorLimits
from mur.a2a.sse import CLOSED, HEARTBEAT, LAGGED, EventHub, Frame, format_frame
from mur.a2a.tasks import INPUT_REQUIRED, SUBMITTED, Task, TaskRegistry
from mur.aio import wait_for
from mur.digits import is_digits
from mur.errors import MurError

CARD_PATH = "/.well-known/agent-card.json"
HEARTBEAT_SECS = 15.0
# A request body over the limit is still read (and dropped) up to this many bytes for at most
# DRAIN_SECS, so a client that sends it promptly reads the 413 rather than a reset.
DRAIN_LIMIT = 8 * 1024 * 1024
DRAIN_SECS = 2.0
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
CLOSE = {"connection": "close"}
# A Host header the card's url may echo: a name or address and a port, nothing else.
_HOST = re.compile(r"^[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?$")

def json_response(body: dict, status: int = 200, headers: dict | None = None) -> Response:
    """A JSON answer in standard JSON (protocol.dumps: no NaN, no lone surrogate)."""
    return Response(rpc.dumps(body), status_code=status, media_type="application/json", headers=headers)


class _Gone(Exception):
    """The client disconnected while its request was being read."""


class Door:
    """The ASGI application. All state lives in the registry and the hub it is given."""

    def __init__(
        self,
        *,
        registry: TaskRegistry,
        hub: EventHub,
        card: dict,
        task_acceptance: str,
        conversation: str,
        fallback_host: str,
        max_body: int = rpc.MAX_BODY,
        auth: DoorAuth | None = None,
        limits: DoorLimits | None = None,
    ):
        self.registry = registry
        self.hub = hub
        self.card = card
        self.task_acceptance = task_acceptance
        self.conversation = conversation
        self.fallback_host = fallback_host
        self.max_body = max_body
        self.auth = auth or DoorAuth()
        self.limits = limits or DoorLimits()
        self.heartbeat_secs = HEARTBEAT_SECS
        self.open_streams = 0  # touched on the server's event loop only

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope)
        try:
            response = await self._route(request, receive)
        except _Gone:
            return
        except Exception as exc:  # noqa: BLE001 - a bug answers -32603, never a dropped connection
            response = json_response(rpc.error(None, rpc.INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}"))
        await response(scope, receive, send)

    async def _route(self, request: Request, receive) -> Response:
        path, method = request.scope["path"], request.method
        if "transfer-encoding" in request.headers and "content-length" in request.headers:
            # RFC 9112 section 6.3: a request framed both ways is a smuggling attempt (or a broken
            # proxy); answering it and closing is the only reading every hop agrees on.
            return json_response({"error": "both Transfer-Encoding and Content-Length"}, status=400, headers=CLOSE)
        if path == CARD_PATH and method == "GET":
            host = request.headers.get("host", "")
            host = host if _HOST.match(host) else self.fallback_host
            url = f"{request.scope['scheme']}://{host}"
            return json_response(rpc.build_card(self.card, url, self.task_acceptance, secured=self.auth.token is not None))
        if self.auth.token is not None:
            if token_in_query(request.scope.get("query_string", b"")):
                why = "Invalid Request: the bearer token goes in the Authorization header, never in the URL"
                return json_response(rpc.error(None, rpc.INVALID_REQUEST, why), status=400)
            presented = request.headers.get("authorization")
            if not bearer_matches(presented, self.auth.token):
                return _unauthorized(presented is not None)
        if path != "/" or method != "POST":
            return Response(status_code=404)
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return json_response({"error": "POST / takes content-type: application/json"}, status=415)
        body = await self._read_body(request, receive)
        if isinstance(body, Response):
            return body
        try:
            req = rpc.parse_request(body)
            method_name = rpc.resolve_method(req.method, self.task_acceptance)
            if method_name is None:
                raise rpc.RpcError(rpc.METHOD_NOT_FOUND, "Method not found", req.id)
            if method_name == "message/send":
                return json_response(rpc.ok(req.id, await self._message_send(req, request)))
            if method_name == "tasks/get":
                return json_response(rpc.ok(req.id, self._tasks_get(req)))
            if method_name == "tasks/cancel":
                return json_response(rpc.ok(req.id, self._tasks_cancel(req)))
            if self.open_streams >= self.limits.max_streams:
                message = f"Server busy: {self.open_streams} streams are open (the most this capsule serves); retry later"
                return json_response(rpc.error(req.id, rpc.SERVER_BUSY, message), status=503, headers={"retry-after": "1"})
            if method_name == "message/stream":
                return self._message_stream(req, request)
            return self._stream_watch(request)
        except rpc.RpcError as exc:
            return json_response(rpc.error(exc.request_id, exc.code, exc.message))

    async def _read_body(self, request: Request, receive) -> bytes | Response:
        """The body, or the answer refusing it: 413 past ``max_body`` (what was sent is drained,
        within reason), 408 when it is not complete within the body deadline."""
        loop = asyncio.get_running_loop()
        declared = request.headers.get("content-length", "")
        too_big = is_digits(declared) and int(declared) > self.max_body
        deadline = loop.time() + (DRAIN_SECS if too_big else self.limits.body_timeout)
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                message = await wait_for(receive(), deadline - loop.time())
            except TimeoutError:
                if too_big:
                    break
                why = f"Invalid Request: the body did not arrive within {self.limits.body_timeout:g} s"
                return json_response(rpc.error(None, rpc.INVALID_REQUEST, why), status=408, headers=CLOSE)
            if message["type"] == "http.disconnect":
                raise _Gone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body and not too_big:
                too_big = True
                deadline = min(deadline, loop.time() + DRAIN_SECS)
            if too_big:
                chunks.clear()
                if size > DRAIN_LIMIT:
                    break
            else:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if too_big:
            why = f"Invalid Request: body larger than {self.max_body} bytes"
            return json_response(rpc.error(None, rpc.INVALID_REQUEST, why), status=413, headers=CLOSE)
        return b"".join(chunks)

    # --- methods ------------------------------------------------------------------------------

    def _new_task(self, req: rpc.RpcRequest, request: Request) -> tuple[Task, bool]:
        msg = rpc.parse_message(req.params, req.id)
        task = Task(
            id=ids.task_id(),
            context_id=msg.context_id or ids.context_id(),
            message_id=msg.message_id,
            text=msg.text,
            source="a2a",
            traceparent=_traceparent(request),
        )
        return task, msg.blocking

    async def _message_send(self, req: rpc.RpcRequest, request: Request) -> dict:
        task, blocking = self._new_task(req, request)
        # A message while the running task waits in request-input is that task's reply.
        delivered = self.registry.deliver_input(task.text)
        if delivered is not None:
            snapshot = delivered
        else:
            snapshot = self.registry.submit(task)
        if blocking and not snapshot.terminal and snapshot.state != INPUT_REQUIRED:
            snapshot = await self._settled(snapshot.id)  # configuration.blocking: answer with the outcome
        return rpc.task_result(snapshot)

    async def _settled(self, task_id: str) -> Task:
        """The task once it has ended or waits for input (the lifecycle thread settles it; this
        loop hears of it once, with no polling)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()

        def settle(snapshot: Task) -> None:
            try:
                loop.call_soon_threadsafe(lambda: done.done() or done.set_result(snapshot))
            except RuntimeError:  # the server stopped meanwhile: nobody is waiting any more
                pass

        now = self.registry.when_settled(task_id, settle)
        return now if now is not None else await done

    def _tasks_get(self, req: rpc.RpcRequest) -> dict:
        task_id = req.params.get("id")
        if task_id is not None and not isinstance(task_id, str):
            raise rpc.RpcError(rpc.INVALID_PARAMS, "Invalid params: id must be a string", req.id)
        task = self.registry.get(task_id)
        if task is None:
            raise rpc.RpcError(rpc.TASK_NOT_FOUND, "Task not found", req.id)
        return rpc.task_result(task)

    def _tasks_cancel(self, req: rpc.RpcRequest) -> dict:
        task_id = req.params.get("id")
        if not isinstance(task_id, str):
            raise rpc.RpcError(rpc.INVALID_PARAMS, "Invalid params: id must be a string", req.id)
        outcome, task = self.registry.cancel(task_id)
        if task is None:
            raise rpc.RpcError(rpc.TASK_NOT_FOUND, "Task not found", req.id)
        if outcome == "not-cancelable":
            if task.terminal:
                why = "it has already ended"
            elif task.cancel_requested:
                why = "a cancel is already under way"
            else:
                why = "it is running and this capsule's executor cannot stop midway (only queued tasks and tasks waiting for input can be canceled)"
            raise rpc.RpcError(rpc.TASK_NOT_CANCELABLE, f"Task cannot be canceled: {why}", req.id)
        if outcome == "dropped":
            # A queued task never reaches the lifecycle loop: its final frame is announced here. A
            # task canceled in request-input is announced by the loop when its executor returns.
            self.hub.publish("status", rpc.status_frame(task.id, task.context_id, task.state, task.message, final=True))
        return rpc.task_result(task)

    def _message_stream(self, req: rpc.RpcRequest, request: Request) -> Response:
        try:
            task, _ = self._new_task(req, request)
        except rpc.RpcError as exc:
            return _sse_once(format_frame("error", {"error": exc.message}))
        loop = asyncio.get_running_loop()
        # Subscribe before submitting, so no frame of the new task can be missed.
        sub, replay = self.hub.subscribe(loop, _last_event_id(request))
        snapshot = self.registry.submit(task)
        if snapshot.state != SUBMITTED:
            self.hub.unsubscribe(sub)
            frame = rpc.status_frame(snapshot.id, snapshot.context_id, snapshot.state, snapshot.message, final=True)
            return _sse_once(format_frame("status", frame))
        return EventStream(self, self._frames(sub, replay, task_id=task.id))

    def _stream_watch(self, request: Request) -> Response:
        loop = asyncio.get_running_loop()
        sub, replay = self.hub.subscribe(loop, _last_event_id(request) or 0)
        ack = format_frame("connection-ack", {"role": "observer", "conversation_mode": self.conversation})
        return EventStream(self, self._frames(sub, replay, task_id=None, first=ack))

    async def _frames(self, sub, replay, task_id: str | None, first: str | None = None) -> AsyncIterator[str]:
        """Replay, then live frames. With ``task_id`` (message/stream) live frames are only that
        task's and its final status ends the stream; the replay a ``Last-Event-ID`` asked for is
        passed whole, as upstream does."""

        def wanted(frame: Frame) -> bool:
            return task_id is None or frame.task_id == task_id

        def ends(frame: Frame) -> bool:
            return task_id is not None and frame.final_status and frame.task_id == task_id

        try:
            if first:
                yield first
            if replay.gap is not None:
                yield format_frame("gap", {"first_available_id": replay.gap})
            last = 0
            for frame in replay.frames:  # asked for by Last-Event-ID: every frame after it
                last = frame.id
                yield frame.text
            while True:
                try:
                    item = await sub.next(self.heartbeat_secs)
                except asyncio.TimeoutError:
                    yield HEARTBEAT
                    continue
                if item is CLOSED:
                    if task_id is None:
                        yield format_frame("capsule-closed", {})
                    return
                if item is LAGGED:
                    yield format_frame("lagged", {"last_delivered_id": last})
                    return
                if item.id <= last:
                    continue
                last = item.id
                if wanted(item):
                    yield item.text
                    if ends(item):
                        return
        finally:
            self.hub.unsubscribe(sub)


class EventStream:
    """An SSE response (an ASGI callable): writes ``frames`` until they end or the client goes.

    Counted against the door's open-stream cap from creation to its end. A client that stops
    reading blocks the write; http1.py aborts its connection after the stall deadline, which ends
    this stream and unsubscribes it.
    """

    def __init__(self, door: Door, frames: AsyncIterator[str]):
        self._door = door
        self._frames = frames
        door.open_streams += 1

    async def __call__(self, scope, receive, send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            pump = asyncio.ensure_future(self._pump(send))
            gone = asyncio.ensure_future(_disconnect(receive))
            try:
                await asyncio.wait({pump, gone}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for job in (pump, gone):
                    job.cancel()
                await asyncio.gather(pump, gone, return_exceptions=True)
        finally:
            await self._frames.aclose()
            self._door.open_streams -= 1

    async def _pump(self, send) -> None:
        async for chunk in self._frames:
            await send({"type": "http.response.body", "body": chunk.encode("utf-8"), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnect(receive) -> None:
    """Returns when the client has gone (the request body was read before the stream began)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _sse_once(frame: str) -> Response:
    return Response(frame, media_type="text/event-stream", headers={"cache-control": "no-cache"})


def _unauthorized(presented: bool) -> Response:
    """401 with RFC 6750's challenge and a JSON-RPC error body (the request id is not read)."""
    reason = "invalid_token" if presented else "unauthenticated"
    challenge = 'Bearer error="invalid_token"' if presented else "Bearer"
    message = "Unauthorized: the bearer token is wrong" if presented else "Unauthorized: this capsule needs Authorization: Bearer <token>"
    body = rpc.error(None, rpc.UNAUTHORIZED, message)
    body["error"]["data"] = {"reason": reason}
    return json_response(body, status=401, headers={"www-authenticate": challenge})


def _traceparent(request: Request) -> str | None:
    """The caller's W3C traceparent as sent (55 characters today), if it is of sane length."""
    value = request.headers.get("traceparent")
    return value if value is not None and len(value) <= 256 else None


def _last_event_id(request: Request) -> int | None:
    value = request.headers.get("last-event-id", "").strip()
    return int(value) if is_digits(value) and len(value) <= 18 else None


class ServerThread:
    """The door's server (mur.a2a.http1) on a pre-bound socket, on a daemon thread with its own loop."""

    GRACE = 2.0  # seconds answers in flight may take to finish once the server stops

    def __init__(self, app, sock: socket.socket, limits: DoorLimits | None = None, auth: DoorAuth | None = None):
        self._app = app
        self._sock = sock
        self._limits = limits or DoorLimits()
        self._auth = auth or DoorAuth()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="mur-a2a-door", daemon=True)
        self._error: BaseException | None = None

    def _serve(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc

    async def _main(self) -> None:
        tls = server_tls(self._auth.tls_cert, self._auth.tls_key) if self._auth.tls else None
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        await serve(self._app, self._sock, self._limits, tls, self._stop, self.GRACE, ready=self._started.set)

    def start(self, timeout: float = 15.0) -> None:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._started.wait(0.005):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise MurError("E-IO-003", f"the A2A server did not start: {self._error or 'timed out'}")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server and wait for its thread."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has ended already
                pass
        if self._thread.is_alive():
            self._thread.join(timeout)
        try:
            self._sock.close()
        except OSError:
            pass
