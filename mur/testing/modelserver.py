"""A loopback Anthropic-Messages-compatible model server that replays a reply script.

Used by the tests and the offline demo: our WASM driver reaches it through the host's HTTP import,
the real ``claude`` CLI through ``ANTHROPIC_BASE_URL``. It answers ``POST /v1/messages`` (any query
string, e.g. the CLI's ``?beta=true``) with the next scripted reply, as one JSON message or, when the
request says ``"stream": true``, as the Messages API's server-sent events. Every request is recorded
with the usage it was served, so a test can compare trace token totals with what the server handed
out.

Run standalone (prints its URL on stdout, serves until SIGINT/SIGTERM):

    python -m mur.testing.modelserver --script replies.yaml [--port N]

Binds loopback addresses only: test traffic never leaves the machine.
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import json
import signal
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

from mur.errors import MurError
from mur.testing.model_script import Reply, load_script, parse_script

EXHAUSTED_MESSAGE = "model server script exhausted"


@dataclass
class RecordedRequest:
    """One request the server saw, and what it answered."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: Any  # parsed JSON, or None when the body was not JSON
    raw: bytes
    reply_kind: str = ""  # text | tool_use | error | malformed | exhausted | count_tokens
    status: int = 200
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def streamed(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _estimate_tokens(data: bytes | str) -> int:
    return max(1, len(data) // 4)


class ModelServer:
    """A scripted Messages API on 127.0.0.1; start() / stop() or use as a context manager."""

    def __init__(self, replies: list[Reply] | list[Any] | None = None, *, host: str = "127.0.0.1", port: int = 0):
        if not _is_loopback(host):
            raise MurError("E-IO-003", f"model server binds loopback only, not {host}")
        self._replies: list[Reply] = self._coerce(replies or [])
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self.requests: list[RecordedRequest] = []
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.model_server = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @staticmethod
    def _coerce(replies: list[Any]) -> list[Reply]:
        if all(isinstance(r, Reply) for r in replies):
            return list(replies)
        return parse_script(list(replies))

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}"

    def start(self) -> "ModelServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="model-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes replies sleeping on a scripted delay
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- script --------------------------------------------------------------------------------

    def extend(self, replies: list[Any]) -> None:
        """Append replies to the script."""
        with self._lock:
            self._replies.extend(self._coerce(replies))

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._replies)

    def _next_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.pop(0) if self._replies else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def message_requests(self) -> list[RecordedRequest]:
        """The recorded POST /v1/messages requests (script consumers), in order."""
        with self._lock:
            return [r for r in self.requests if r.reply_kind not in ("count_tokens", "other", "invalid")]

    def served_usage(self) -> dict[str, int]:
        """Token totals over every successful reply served so far."""
        totals = {"input_tokens": 0, "output_tokens": 0}
        with self._lock:
            for r in self.requests:
                if r.reply_kind in ("text", "tool_use"):
                    totals["input_tokens"] += r.usage.get("input_tokens", 0)
                    totals["output_tokens"] += r.usage.get("output_tokens", 0)
        return totals

    def next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):024d}"


# -- rendering ---------------------------------------------------------------------------------


def _content_blocks(server: ModelServer, reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.text:
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.tool_calls:
        call_id = call.id or server.next_id("toolu")
        blocks.append({"type": "tool_use", "id": call_id, "name": call.name, "input": call.input})
    if not blocks:
        blocks.append({"type": "text", "text": ""})
    return blocks


def _usage(reply: Reply, raw: bytes, blocks: list[dict[str, Any]]) -> dict[str, int]:
    if reply.usage is not None:
        usage = {"input_tokens": 0, "output_tokens": 0}
        usage.update(reply.usage)
        return usage
    produced = "".join(b.get("text", "") + json.dumps(b.get("input", "")) for b in blocks)
    return {"input_tokens": _estimate_tokens(raw), "output_tokens": _estimate_tokens(produced)}


def render_message(server: ModelServer, reply: Reply, request: dict[str, Any], raw: bytes) -> dict[str, Any]:
    """The Messages API response object for a text / tool_use reply."""
    blocks = _content_blocks(server, reply)
    stop = reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")
    return {
        "id": reply.id or server.next_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": reply.model or str(request.get("model") or "scripted-model"),
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _usage(reply, raw, blocks),
    }


def sse_events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The Messages streaming events that spell `message` out, as (event, data) pairs."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for index, block in enumerate(message["content"]):
        if block["type"] == "tool_use":
            opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block.get("text", "")}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage.get("output_tokens", 0)},
    }
    yield "message_stop", {"type": "message_stop"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "mur-modelserver/1"

    @property
    def model_server(self) -> ModelServer:
        return self.server.model_server  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read the recording
        pass

    # -- plumbing ------------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.send_header("request-id", self.model_server.next_id("req"))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, etype: str, message: str) -> None:
        envelope = {"type": "error", "error": {"type": etype, "message": message}}
        self._send(status, json.dumps(envelope).encode())

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length else b""

    # -- verbs ---------------------------------------------------------------------------------

    def do_GET(self) -> None:
        if urlsplit(self.path).path in ("/", "/healthz"):
            self._send(200, b'{"ok":true}')
        else:
            self._error(404, "not_found_error", f"no route for GET {self.path}")

    do_HEAD = do_GET

    def do_POST(self) -> None:
        raw = self._read_body()
        parts = urlsplit(self.path)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        record = RecordedRequest(
            method="POST", path=parts.path, query=parts.query,
            headers={k.lower(): v for k, v in self.headers.items()}, body=body, raw=raw,
        )
        if parts.path == "/v1/messages/count_tokens":
            record.reply_kind = "count_tokens"
            self.model_server._record(record)
            self._send(200, json.dumps({"input_tokens": _estimate_tokens(raw)}).encode())
            return
        if parts.path != "/v1/messages":
            record.reply_kind, record.status = "other", 404
            self.model_server._record(record)
            self._error(404, "not_found_error", f"no route for POST {parts.path}")
            return
        self._answer(record)

    def _answer(self, record: RecordedRequest) -> None:
        server = self.model_server
        if not isinstance(record.body, dict):
            record.reply_kind, record.status = "invalid", 400
            server._record(record)
            self._error(400, "invalid_request_error", "request body is not a JSON object")
            return
        reply = server._next_reply()
        if reply is None:
            record.reply_kind, record.status = "exhausted", 500
            server._record(record)
            self._error(500, "api_error", EXHAUSTED_MESSAGE)
            return
        record.reply_kind = reply.kind
        if reply.error is not None:
            record.status = reply.error.status
        server._record(record)  # recorded on arrival, so a test sees requests still being answered
        if reply.delay and server._stopping.wait(reply.delay):
            return  # server shutting down mid-delay
        try:
            self._reply(record, reply)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. its timeout fired during the delay)

    def _reply(self, record: RecordedRequest, reply: Reply) -> None:
        server = self.model_server
        if reply.error is not None:
            headers = {"retry-after": reply.error.retry_after} if reply.error.retry_after else None
            self._send(reply.error.status, reply.error.render_body(), headers=headers)
            return
        if reply.malformed is not None:
            if record.streamed:
                self._stream([f"event: message_start\ndata: {reply.malformed}\n\n".encode()])
            else:
                self._send(200, reply.malformed.encode())
            return
        message = render_message(server, reply, record.body, record.raw)
        record.usage = dict(message["usage"])
        if record.streamed:
            self._stream(
                f"event: {event}\ndata: {json.dumps(data)}\n\n".encode() for event, data in sse_events(message)
            )
        else:
            self._send(200, json.dumps(message).encode())

    def _stream(self, chunks: Any) -> None:
        # No content-length on an event stream: close the connection to end it (HTTP/1.1).
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.send_header("request-id", self.model_server.next_id("req"))
        self.end_headers()
        self.close_connection = True
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()


def main(argv: list[str] | None = None) -> int:
    """`python -m mur.testing.modelserver --script FILE [--port N]`: serve until interrupted."""
    parser = argparse.ArgumentParser(prog="python -m mur.testing.modelserver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", required=True, type=Path, help="YAML/JSON reply script")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument("--record", type=Path, help="write each request as a JSON line to this file on exit")
    args = parser.parse_args(argv)
    try:
        server = ModelServer(load_script(args.script), host=args.host, port=args.port)
    except MurError as err:
        print(err.render(), file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error[E-IO-003]: cannot bind {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    server.start()
    print(server.url, flush=True)
    done.wait()
    server.stop()
    if args.record:
        with args.record.open("w", encoding="utf-8") as fh:
            for r in server.requests:
                fh.write(json.dumps({"path": r.path, "query": r.query, "body": r.body, "reply_kind": r.reply_kind,
                                     "status": r.status, "usage": r.usage}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
