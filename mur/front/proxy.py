"""The front's server: accept on the stable address, route each request, forward it, relay the answer.

Routing (per request, not per connection, so a keep-alive client follows a switch at its next request):
  * a JSON-RPC request naming a task (`params.id`, `params.message.taskId`) goes to the backend that
    owns it; an owner not known yet means: the active backend, then each draining one, moving on
    when a backend answers "Task not found" (-32001); a finished task of a retired (or drained)
    backend is answered from the cache (after the bearer token is checked);
  * everything else goes to the active backend; while it refuses connections, to a standby one (the
    service the front fell back from, kept during a deploy: if the new release dies before the
    deploy ends, or the machine reboots then, the service answers).
Each forwarded request gets its own backend connection (`Connection: close`), so nothing ties a
client to a backend that is being drained. A backend that refuses connections (a release starting,
restarting after a crash) is retried until `connect_wait`, re-reading which backend is active at
every try, so a request waits through a switch instead of failing. A request that reached a backend
which then closed without answering is retried only when repeating it cannot do anything twice
(GET, `tasks/get`); otherwise the client gets 502 with a JSON-RPC error. A `message/send` answered
"task rejected: capsule is busy" (the service's queue is full, as it is for a moment while a new
release warms up beside the old one) is sent again, pausing 50 ms doubling to 0.5 s, for up to
`busy_wait` seconds: a burst becomes latency instead of refusals (the rejected attempts stay
rejected tasks in the service; the client sees the task that was accepted).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import ssl
import time
from typing import Any, Callable

from mur.aio import wait_for
from mur.front import http
from mur.front.config import Backend, FrontConfig
from mur.front.drain import TaskBook, DrainStatus, follow

IDLE_TIMEOUT = 60.0  # a keep-alive connection with no new request
BODY_TIMEOUT = 30.0
STALL_TIMEOUT = 60.0  # a client that reads nothing of a relayed answer for this long is dropped
ANSWER_TIMEOUT = 3600.0  # the longest a backend may take to start answering (message/send blocks)
CLOSING_IDLE = 6.0  # httpx drops an idle pooled connection after 5 s
RETRY_PAUSE = 0.05
BUSY_PAUSE = 0.05
BUSY_TEXT = "task rejected: capsule is busy"  # mur.a2a.tasks.REJECTED_BUSY
BUSY = object()
TASK_METHODS = ("tasks/get", "tasks/cancel", "tasks/resubscribe")
SAFE_METHODS = ("tasks/get",)
TASK_NOT_FOUND, TASK_NOT_CANCELABLE, UNAUTHORIZED, INTERNAL = -32001, -32002, -32030, -32603


def rpc_error(req_id: Any, code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": message}}).encode()


class Unavailable(Exception):
    """No backend could be reached in time (the answer is 503)."""


class RelayBroken(Exception):
    """A connection broke while an answer was being relayed: part of it went out, nothing can be retried."""


class Front:
    def __init__(self, cfg: FrontConfig, report: Callable[[], None] = lambda: None,
                 log: Callable[[str], None] = lambda _m: None):
        self.cfg = cfg
        self.book = TaskBook(cached=cfg.retain_tasks)
        self.inflight: dict[str, int] = {}
        self.drains: dict[str, DrainStatus] = {}
        self.report, self.log = report, log
        self.connections = 0
        self.closing = 0.0  # when this front stopped accepting (monotonic), 0 while it accepts
        self.counts = {"requests": 0, "answered_from_cache": 0, "refused": 0, "backend_errors": 0, "retries": 0,
                       "busy_retries": 0}
        self._client_tls: ssl.SSLContext | None = None

    # --- configuration --------------------------------------------------------------------------------

    def apply(self, cfg: FrontConfig) -> None:
        """Take a checked configuration (control.py probes a new active backend before calling this)."""
        old = {b.name for b in self.cfg.backends}
        self.cfg = cfg
        for gone in old - {b.name for b in cfg.backends}:
            self.book.retire(gone)
            self.drains.pop(gone, None)
            self.log(f"backend {gone} retired")
        for b in cfg.draining:
            if b.name not in self.drains:
                status = self.drains[b.name] = DrainStatus(since=time.monotonic())
                self.log(f"backend {b.name} draining")
                asyncio.get_running_loop().create_task(self._follow(b.name, status))
        for b in cfg.backends:
            if b.role == "active":
                self.drains.pop(b.name, None)

    async def _follow(self, name: str, status: DrainStatus) -> None:
        def still() -> bool:
            b = self.cfg.backend(name)
            return b is not None and b.role == "draining" and self.drains.get(name) is status
        await follow(name, self.book, status, self.task_query, lambda: self.inflight.get(name, 0), still,
                     self.cfg.drain_timeout, self.report)

    def backend_tls(self) -> ssl.SSLContext | None:
        if not self.cfg.backend_pin:
            return None
        if self._client_tls is None:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # verified by pin in open_backend, before a byte is sent
            self._client_tls = ctx
        return self._client_tls

    def token(self) -> str | None:
        if not self.cfg.token_file:
            return None
        try:
            with open(self.cfg.token_file, encoding="utf-8") as fh:
                return fh.read().strip() or None
        except OSError:
            return None

    # --- backends -------------------------------------------------------------------------------------

    async def open_backend(self, backend: Backend) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", backend.port, ssl=self.backend_tls(),
                                                       limit=http.MAX_HEAD)
        if self.cfg.backend_pin:
            sslobj = writer.get_extra_info("ssl_object")
            der = sslobj.getpeercert(binary_form=True) if sslobj else b""
            if hashlib.sha256(der or b"").hexdigest() != self.cfg.backend_pin.lower():
                writer.close()
                raise ConnectionRefusedError(f"backend {backend.name} presents another certificate")
        return reader, writer

    async def connect(self, pick: Callable[[], Backend | None], wait: float, standby: bool = False
                      ) -> tuple[Backend, asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to `pick()` (asked again at every try), retrying refusals for `wait` seconds; with
        `standby`, a standby backend answers while the picked one refuses."""
        deadline = time.monotonic() + wait
        last = "no backend is configured"
        while True:
            backend = pick()
            tries = [backend] if backend is not None else []
            if standby:
                tries += [b for b in self.cfg.backends if b.role == "standby"]
            for b in tries:
                try:
                    reader, writer = await wait_for(self.open_backend(b), 5.0)
                    return b, reader, writer
                except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
                    last = f"backend {b.name} (port {b.port}): {exc or type(exc).__name__}"
            if time.monotonic() >= deadline:
                raise Unavailable(last)
            self.counts["retries"] += 1
            await asyncio.sleep(RETRY_PAUSE)

    async def task_query(self, name: str, tid: str) -> dict[str, Any] | None:
        """tasks/get on one backend (for the drain): the result, None when unknown there, OSError else."""
        backend = self.cfg.backend(name)
        if backend is None:
            raise OSError("backend gone")
        body = json.dumps({"jsonrpc": "2.0", "id": "mur-front-drain", "method": "tasks/get",
                           "params": {"id": tid}}).encode()
        headers = [("host", f"127.0.0.1:{self.cfg.listen_port}"), ("content-type", "application/json")]
        token = self.token()
        if token:
            headers.append(("authorization", f"Bearer {token}"))
        try:
            reader, writer = await wait_for(self.open_backend(backend), 5.0)
        except asyncio.TimeoutError as exc:
            raise OSError("connect timed out") from exc
        try:
            writer.write(http.render_head("POST / HTTP/1.1", headers + [("content-length", str(len(body))),
                                                                         ("connection", "close")]) + body)
            await writer.drain()
            head = await wait_for(http.read_head(reader), 10.0)
            if head is None:
                raise OSError("closed")
            data = await wait_for(http.read_body(reader, head, until_close=True), 10.0)
        except (http.BadMessage, asyncio.TimeoutError) as exc:
            raise OSError(str(exc)) from exc
        finally:
            writer.close()
        try:
            answer = json.loads(data)
        except ValueError as exc:
            raise OSError("not JSON") from exc
        if "result" in answer:
            return answer["result"]
        if (answer.get("error") or {}).get("code") == TASK_NOT_FOUND:
            return None
        raise OSError(f"tasks/get answered {answer.get('error')}")

    # --- clients --------------------------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.connections > self.cfg.max_connections:
                self.counts["refused"] += 1
                writer.write(http.simple_response(503, b"", "text/plain", [("retry-after", "1")], close=True))
                return
            first = True
            while True:
                try:
                    head = await self._next_head(reader, self.cfg.head_timeout if first else IDLE_TIMEOUT, first)
                except asyncio.TimeoutError:
                    if first:
                        writer.write(http.simple_response(408, b"", "text/plain", close=True))
                    return
                if head is None:
                    return
                first = False
                # An answer that said keep-alive is kept to even when this front stopped accepting
                # meanwhile: the client may send its next request at once, and a connection closed
                # under it is a reset. _next_head waits for that request (answered with `close`).
                if not await self.serve_one(head, reader, writer):
                    return
        except (http.BadMessage, ConnectionError, asyncio.TimeoutError) as exc:
            status = exc.status if isinstance(exc, http.BadMessage) else 0
            if status and not writer.is_closing():
                writer.write(http.simple_response(status, rpc_error(None, -32600, f"Invalid Request: {exc}"),
                                                  close=True))
        finally:
            try:
                await self._close(writer)
            finally:  # counted until closed: a front that stops waits for this, then exits
                self.connections -= 1

    async def _next_head(self, reader: asyncio.StreamReader, timeout: float, first: bool) -> http.Head | None:
        """The next request head; on an idle keep-alive connection of a front that stopped accepting,
        None after CLOSING_IDLE (a client reuses such a connection soon or never; either way its next
        request is answered with `connection: close` and goes to the new front)."""
        read = asyncio.ensure_future(http.read_head(reader))
        idle_since = time.monotonic()
        deadline = idle_since + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if self.closing and not first:  # the client drops it CLOSING_IDLE after its last answer at most
                    left = min(left, max(self.closing, idle_since) + CLOSING_IDLE - time.monotonic())
                if left <= 0:
                    if self.closing and not first:
                        return None
                    raise asyncio.TimeoutError
                done, _ = await asyncio.wait({read}, timeout=min(left, 0.5))
                if done:
                    return read.result()
        finally:
            if not read.done():
                read.cancel()

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        try:
            await wait_for(writer.drain(), 5.0)
        except (OSError, asyncio.TimeoutError, RuntimeError):
            pass
        writer.close()

    async def serve_one(self, head: http.Head, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; returns whether the client connection may carry another."""
        line = http.request_line(head)
        self.counts["requests"] += 1
        if "100-continue" in head.tokens("expect"):
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await wait_for(http.read_body(reader, head), BODY_TIMEOUT)
        keep = line.version == "HTTP/1.1" and "close" not in head.tokens("connection") and not self.closing
        rpc = _rpc(body) if line.method == "POST" else {}
        tid = _task_of(rpc)
        cached = self._cached_answer(rpc, tid, head)
        if cached is not None:
            self.counts["answered_from_cache"] += 1
            writer.write(http.simple_response(cached[0], cached[1], close=not keep))
            return keep
        names = self._candidates(tid)
        try:
            return await self._forward(line, head, body, rpc, names, writer, keep)
        except Unavailable as exc:
            self.counts["backend_errors"] += 1
            self.log(f"no backend answered: {exc}")
            writer.write(http.simple_response(503, rpc_error(rpc.get("id"), INTERNAL, f"Service unavailable: {exc}"),
                                              extra=[("retry-after", "1")], close=True))
            return False

    def _cached_answer(self, rpc: dict[str, Any], tid: str | None, head: http.Head) -> tuple[int, bytes] | None:
        """The cache's answer about a finished task of a draining or retired backend, else None (a
        finished task never changes, whichever process of that name runs now)."""
        if tid is None or tid not in self.book.cached or rpc.get("method") not in ("tasks/get", "tasks/cancel"):
            return None
        token = self.token()
        presented = head.get("authorization") or ""
        if token and not hmac.compare_digest(presented.encode(), f"Bearer {token}".encode()):
            return 401, rpc_error(None, UNAUTHORIZED, "Unauthorized: a valid bearer token is required")
        if rpc.get("method") == "tasks/get":
            return 200, json.dumps({"jsonrpc": "2.0", "id": rpc.get("id"), "result": self.book.cached[tid]}).encode()
        return 200, rpc_error(rpc.get("id"), TASK_NOT_CANCELABLE, "Task cannot be canceled: it has already ended")

    def _candidates(self, tid: str | None) -> list[str | None]:
        """Backends to try in order; None stands for "whichever is active when connecting"."""
        if tid is None:
            return [None]
        owner = self.book.owner_of(tid)
        if owner and self.cfg.backend(owner) is not None:
            rest = [b.name for b in self.cfg.draining if b.name != owner]
            return [owner, *([None] if self.cfg.active and self.cfg.active.name != owner else []), *rest]
        return [None, *[b.name for b in self.cfg.draining]]

    def _pick(self, name: str | None) -> Callable[[], Backend | None]:
        return (lambda: self.cfg.active) if name is None else (lambda: self.cfg.backend(name))

    async def _forward(self, line: http.RequestLine, head: http.Head, body: bytes, rpc: dict[str, Any],
                       names: list[str | None], writer: asyncio.StreamWriter, keep: bool) -> bool:
        method = rpc.get("method") or line.method
        safe = line.method in ("GET", "HEAD") or method in SAFE_METHODS
        out = http.render_head(f"{line.method} {line.target} HTTP/1.1",
                               head.forwarded([("content-length", str(len(body))), ("connection", "close")])) + body
        busy_until = time.monotonic() + self.cfg.busy_wait if method == "message/send" and self.cfg.busy_wait else 0.0
        pause = BUSY_PAUSE
        for attempt in range(4 if safe else 1):
            try:
                while True:
                    done = await self._try(line, rpc, out, names, writer, keep, busy_until)
                    if done is not BUSY:
                        return bool(done)
                    self.counts["busy_retries"] += 1  # the capsule's queue is full: hold the request a moment
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 0.5)
            except RelayBroken as exc:
                self.log(f"an answer to a {method} request broke off: {exc}")
                return False
            except (ConnectionError, http.BadMessage, asyncio.IncompleteReadError) as exc:
                self.counts["backend_errors"] += 1
                self.log(f"a backend dropped a {method} request ({exc})" + ("; retrying" if safe and attempt < 3 else ""))
                if writer.is_closing():
                    return False
                last_error = exc
        writer.write(http.simple_response(502, rpc_error(rpc.get("id"), INTERNAL,
                                                         f"Bad gateway: the service closed the connection ({last_error})"),
                                          close=True))
        return False

    async def _try(self, line: http.RequestLine, rpc: dict[str, Any], out: bytes, names: list[str | None],
                   writer: asyncio.StreamWriter, keep: bool, busy_until: float = 0.0) -> bool | object:
        """Forward to the candidates in turn; BUSY when the answer is "capsule is busy" and the request
        may still wait (nothing was written to the client then)."""
        for i, name in enumerate(names):
            last = i == len(names) - 1
            hold = busy_until > time.monotonic()
            try:
                backend, breader, bwriter = await self.connect(self._pick(name),
                                                               self.cfg.connect_wait if i == 0 else 2.0,
                                                               standby=name is None)
            except Unavailable:
                if i == 0:
                    raise
                continue  # a draining backend that is gone cannot own the task
            self.inflight[backend.name] = self.inflight.get(backend.name, 0) + 1
            try:
                bwriter.write(out)
                await bwriter.drain()
                rhead = await wait_for(http.read_head(breader), ANSWER_TIMEOUT)
                if rhead is None:
                    raise ConnectionResetError("closed before answering")
                status = http.status_of(rhead)
                if (not last or hold) and status == 200 and not rhead.chunked:
                    data = await http.read_body(breader, rhead, until_close=True)
                    if not last and _not_found(data):
                        continue
                    if hold and _busy(data):
                        return BUSY
                    self.book.learn(data, backend.name)
                    writer.write(http.render_head(rhead.first, rhead.forwarded(
                        [("content-length", str(len(data))), ("connection", "keep-alive" if keep else "close")])) + data)
                    return keep
                return await self._relay(backend, breader, rhead, status, line.method, writer, keep)
            finally:
                self.inflight[backend.name] -= 1
                bwriter.close()
        # every backend said "Task not found": answer as the active one would
        writer.write(http.simple_response(200, rpc_error(rpc.get("id"), TASK_NOT_FOUND, "Task not found"),
                                          close=not keep))
        return keep

    async def _relay(self, backend: Backend, breader: asyncio.StreamReader, rhead: http.Head, status: int,
                     method: str, writer: asyncio.StreamWriter, keep: bool) -> bool:
        """Relay a backend's answer as it arrives, learning the task ids it names."""
        framing: list[tuple[str, str]]
        length = rhead.length()
        if rhead.chunked:
            framing = [("transfer-encoding", "chunked")]
        elif length is not None:
            framing = [("content-length", str(length))]
        else:
            framing, keep = [], False
        if 100 <= status < 200 or status in (204, 304):
            framing = []
        writer.write(http.render_head(rhead.first, rhead.forwarded(framing + [("connection", "keep-alive" if keep else "close")])))
        seen = bytearray()

        async def send(data: bytes) -> None:
            if len(seen) < 1 << 20:  # task ids come first in an answer or a stream's frames
                seen.extend(data[: (1 << 20) - len(seen)])
                self.book.learn(bytes(seen[-len(data) - 40:]), backend.name)
            writer.write(data)
            await wait_for(writer.drain(), STALL_TIMEOUT)

        try:
            clean = await http.relay_body(breader, rhead, send, status, method)
            await wait_for(writer.drain(), STALL_TIMEOUT)
        except (ConnectionError, http.BadMessage, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            raise RelayBroken(str(exc) or type(exc).__name__) from exc
        return keep and clean


def _rpc(body: bytes) -> dict[str, Any]:
    if not body or len(body) > http.MAX_BODY:
        return {}
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _task_of(rpc: dict[str, Any]) -> str | None:
    params = rpc.get("params")
    if not isinstance(params, dict):
        return None
    if rpc.get("method") in TASK_METHODS:
        tid = params.get("id")
    else:
        msg = params.get("message")
        tid = msg.get("taskId") if isinstance(msg, dict) else None
    return tid if isinstance(tid, str) and tid.startswith("tsk_") else None


def _busy(data: bytes) -> bool:
    """A message/send answered "rejected: capsule is busy" (its queue is full; mur.a2a.tasks)."""
    if b"rejected" not in data or BUSY_TEXT.encode() not in data:
        return False
    try:
        result = json.loads(data).get("result") or {}
    except (ValueError, AttributeError):
        return False
    status = result.get("status") or {} if isinstance(result, dict) else {}
    return status.get("state") == "rejected" and BUSY_TEXT in json.dumps(status.get("message"))


def _not_found(data: bytes) -> bool:
    try:
        answer = json.loads(data)
    except ValueError:
        return False
    return isinstance(answer, dict) and (answer.get("error") or {}).get("code") == TASK_NOT_FOUND


def server_tls(cfg: FrontConfig) -> ssl.SSLContext | None:
    if not cfg.tls_cert:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    return ctx

