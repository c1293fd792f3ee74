"""The HTTP door: a small ASGI app (starlette request/response objects) served by uvicorn.

Routes (upstream section 6.1):

* ``GET /.well-known/agent-card.json`` -> the agent card;
* ``POST /`` with ``content-type: application/json`` -> JSON-RPC 2.0;
* ``POST /`` with another content type -> 415 (upstream answers 404; see docs/a2a.md);
* a body over ``MAX_BODY`` -> 413 carrying a JSON-RPC error;
* anything else -> 404.

uvicorn runs on a background thread with its own event loop, on a socket bound here so that a
taken ``network.internal_port`` is reported as ``E-RUN-010`` before anything else starts.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import threading
import time
from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from mur import ids
from mur.a2a import protocol as rpc
from mur.a2a.sse import CLOSED, HEARTBEAT, LAGGED, EventHub, Frame, format_frame
from mur.a2a.tasks import SUBMITTED, Task, TaskRegistry
from mur.errors import MurError

CARD_PATH = "/.well-known/agent-card.json"
HEARTBEAT_SECS = 15.0
# A request body over the limit is still read (and dropped) up to this many bytes, so the client
# is not reset before it reads the 413; past it the connection is simply closed.
DRAIN_LIMIT = 8 * 1024 * 1024
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


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
    ):
        self.registry = registry
        self.hub = hub
        self.card = card
        self.task_acceptance = task_acceptance
        self.conversation = conversation
        self.fallback_host = fallback_host
        self.max_body = max_body
        self.heartbeat_secs = HEARTBEAT_SECS

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            response = await self._route(request)
        except Exception as exc:  # noqa: BLE001 - a bug answers -32603, never a dropped connection
            response = JSONResponse(rpc.error(None, rpc.INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}"))
        await response(scope, receive, send)

    async def _route(self, request: Request) -> Response:
        path, method = request.url.path, request.method
        if path == CARD_PATH and method == "GET":
            host = request.headers.get("host") or self.fallback_host
            return JSONResponse(rpc.build_card(self.card, f"http://{host}", self.task_acceptance))
        if path != "/" or method != "POST":
            return Response(status_code=404)
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            return JSONResponse({"error": "POST / takes content-type: application/json"}, status_code=415)
        body = await self._read_body(request)
        if body is None:
            return JSONResponse(
                rpc.error(None, rpc.INVALID_REQUEST, f"Invalid Request: body larger than {self.max_body} bytes"),
                status_code=413,
            )
        try:
            req = rpc.parse_request(body)
            method_name = rpc.resolve_method(req.method, self.task_acceptance)
            if method_name is None:
                raise rpc.RpcError(rpc.METHOD_NOT_FOUND, "Method not found", req.id)
            if method_name == "message/send":
                return JSONResponse(rpc.ok(req.id, self._message_send(req, request)))
            if method_name == "tasks/get":
                return JSONResponse(rpc.ok(req.id, self._tasks_get(req)))
            if method_name == "tasks/cancel":
                return JSONResponse(rpc.ok(req.id, self._tasks_cancel(req)))
            if method_name == "message/stream":
                return self._message_stream(req, request)
            return self._stream_watch(request)
        except rpc.RpcError as exc:
            return JSONResponse(rpc.error(exc.request_id, exc.code, exc.message))

    async def _read_body(self, request: Request) -> bytes | None:
        """The body, or None when it exceeds ``max_body`` (what was sent is drained, within reason)."""
        declared = request.headers.get("content-length")
        too_big = declared is not None and declared.isdigit() and int(declared) > self.max_body
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                too_big = True
            if too_big:
                chunks.clear()
                if size > DRAIN_LIMIT:
                    break
                continue
            chunks.append(chunk)
        return None if too_big else b"".join(chunks)

    # --- methods ------------------------------------------------------------------------------

    def _new_task(self, req: rpc.RpcRequest, request: Request) -> Task:
        msg = rpc.parse_message(req.params, req.id)
        return Task(
            id=ids.task_id(),
            context_id=msg.context_id or ids.context_id(),
            message_id=msg.message_id,
            text=msg.text,
            source="a2a",
            traceparent=request.headers.get("traceparent"),
        )

    def _message_send(self, req: rpc.RpcRequest, request: Request) -> dict:
        task = self._new_task(req, request)
        # A message while the running task waits in request-input is that task's reply.
        delivered = self.registry.deliver_input(task.text)
        if delivered is not None:
            return rpc.task_result(delivered)
        return rpc.task_result(self.registry.submit(task))

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
            task = self._new_task(req, request)
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
        return StreamingResponse(
            self._frames(sub, replay, task_id=task.id), media_type="text/event-stream", headers=SSE_HEADERS
        )

    def _stream_watch(self, request: Request) -> Response:
        loop = asyncio.get_running_loop()
        sub, replay = self.hub.subscribe(loop, _last_event_id(request) or 0)
        ack = format_frame("connection-ack", {"role": "observer", "conversation_mode": self.conversation})
        return StreamingResponse(
            self._frames(sub, replay, task_id=None, first=ack), media_type="text/event-stream", headers=SSE_HEADERS
        )

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
                    item = await asyncio.wait_for(sub.queue.get(), self.heartbeat_secs)
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


def _sse_once(frame: str) -> Response:
    return Response(frame, media_type="text/event-stream", headers=SSE_HEADERS)


def _last_event_id(request: Request) -> int | None:
    value = request.headers.get("last-event-id", "").strip()
    return int(value) if value.isdigit() else None


# --- binding and serving ------------------------------------------------------------------------


def bind_socket(bind: str, port: int | None) -> socket.socket:
    """A listening TCP socket on ``bind``:``port`` (0/None: OS-assigned); E-RUN-010 when taken."""
    try:
        infos = socket.getaddrinfo(bind, port or 0, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise MurError("E-IO-003", f"cannot resolve bind address {bind!r}: {exc}", hint="pass an IP address to --bind") from exc
    family, kind, proto, _, address = infos[0]
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY only on such sockets, and
    # without it every response pays Nagle + delayed ACK (~40 ms).
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE and port:
            raise MurError(
                "E-RUN-010",
                f"internal_port {port} is already bound",
                hint="stop the process listening on it, or set another network.internal_port",
            ) from exc
        raise MurError("E-IO-003", f"cannot bind {bind}:{port or 0}: {exc.strerror or exc}", hint="check --bind") from exc
    sock.set_inheritable(False)
    return sock


def capsule_url(bind: str, port: int) -> str:
    """``localhost:<port>`` for a loopback or wildcard bind (upstream's form), else ``host:port``."""
    try:
        ip = ipaddress.ip_address(bind)
    except ValueError:
        return f"{bind}:{port}"
    if ip.is_loopback or ip.is_unspecified:
        return f"localhost:{port}"
    return f"[{bind}]:{port}" if ip.version == 6 else f"{bind}:{port}"


class ServerThread:
    """uvicorn serving an ASGI app on a pre-bound socket, on a daemon thread."""

    def __init__(self, app, sock: socket.socket):
        import uvicorn

        self._sock = sock
        config = uvicorn.Config(
            app,
            log_config=None,
            log_level="error",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=30,
            server_header=False,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, name="mur-a2a-door", daemon=True)
        self._error: BaseException | None = None

    def _serve(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self._error = exc

    def start(self, timeout: float = 15.0) -> None:
        """Start serving; returns once uvicorn accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._server.should_exit = True
                raise MurError("E-IO-003", f"the A2A server did not start: {self._error or 'timed out'}")
            time.sleep(0.005)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask uvicorn to exit and wait for its thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        try:
            self._sock.close()
        except OSError:
            pass
