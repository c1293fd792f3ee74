"""A small but real OTLP/HTTP trace receiver on 127.0.0.1, for tests and for debugging locally.

  POST   /v1/traces   application/x-protobuf (ExportTraceServiceRequest) or application/json
                      (OTLP JSON: hex trace/span ids, lowerCamelCase keys); gzip/deflate bodies accepted
  GET    /spans       {"requests": N, "spans": [...]} every span received so far, flattened
  DELETE /spans       forget everything

Run it: `python -m mur.testing.otlp_receiver --port 4318` (prints one JSON line
`{"url": "http://127.0.0.1:PORT", "pid": N}` once it listens; `--port 0` picks a free port).
`--delay SECONDS` answers every export that late (a slow collector); `--status CODE` answers with
that HTTP status (a failing one). In-process use: `with Receiver() as rx: ... rx.spans()`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import os
import socket
import sys
import threading
import time
import zlib
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1 import trace_pb2

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class SpanStore:
    """Received spans, flattened to plain dicts (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[dict[str, Any]] = []
        self.requests = 0

    def add(self, request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
        spans = flatten(request)
        with self._lock:
            self.requests += 1
            self._spans.extend(spans)
        return spans

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": self.requests, "spans": list(self._spans)}

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()
            self.requests = 0


# --- decoding --------------------------------------------------------------------------------------


def decode(body: bytes, content_type: str, content_encoding: str = "") -> ExportTraceServiceRequest:
    """An OTLP/HTTP trace request body -> ExportTraceServiceRequest; ValueError when it is not one."""
    encoding = content_encoding.strip().lower()
    try:
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
    except (OSError, zlib.error, EOFError) as exc:
        raise ValueError(f"bad {encoding} body: {exc}") from exc
    kind = content_type.split(";")[0].strip().lower()
    request = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(body)
        except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError (and friends)
            raise ValueError(f"not an ExportTraceServiceRequest: {exc}") from exc
        return request
    if kind == JSON:
        try:
            data = json.loads(body or b"{}")
            json_format.ParseDict(_hex_ids_to_base64(data), request, ignore_unknown_fields=True)
        except (ValueError, json_format.ParseError) as exc:
            raise ValueError(f"not OTLP JSON: {exc}") from exc
        return request
    raise LookupError(kind)


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP JSON writes trace/span ids as hex; protobuf's JSON mapping expects base64 for bytes."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                try:
                    value = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError as exc:
                    raise ValueError(f"{key} is not hex: {value!r}") from exc
            out[key] = _hex_ids_to_base64(value)
        return out
    if isinstance(node, list):
        return [_hex_ids_to_base64(item) for item in node]
    return node


def flatten(request: ExportTraceServiceRequest) -> list[dict[str, Any]]:
    """One dict per span, carrying its resource and scope."""
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attrs(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = {"name": scope_spans.scope.name, "version": scope_spans.scope.version}
            for span in scope_spans.spans:
                spans.append(
                    {
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex() or None,
                        "name": span.name,
                        "kind": trace_pb2.Span.SpanKind.Name(span.kind),
                        "start_time_unix_nano": span.start_time_unix_nano,
                        "end_time_unix_nano": span.end_time_unix_nano,
                        "attributes": _attrs(span.attributes),
                        "status": {
                            "code": trace_pb2.Status.StatusCode.Name(span.status.code),
                            "message": span.status.message,
                        },
                        "links": [
                            {"trace_id": link.trace_id.hex(), "span_id": link.span_id.hex(),
                             "attributes": _attrs(link.attributes)}
                            for link in span.links
                        ],
                        "events": [
                            {"name": ev.name, "time_unix_nano": ev.time_unix_nano, "attributes": _attrs(ev.attributes)}
                            for ev in span.events
                        ],
                        "resource": resource,
                        "scope": scope,
                    }
                )
    return spans


def _attrs(key_values: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in key_values}


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    if kind == "kvlist_value":
        return _attrs(any_value.kvlist_value.values)
    if kind == "bytes_value":
        return any_value.bytes_value.hex()
    return getattr(any_value, kind)


# --- the HTTP app ----------------------------------------------------------------------------------


def create_app(store: SpanStore, delay: float = 0.0, status: int = 200, log: Any = None):
    """The starlette app: stores every valid export (even when answering late or with an error)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def traces(request: Request) -> Response:
        body = await request.body()
        content_type = request.headers.get("content-type", "")
        try:
            decoded = decode(body, content_type, request.headers.get("content-encoding", ""))
        except LookupError:
            return JSONResponse({"error": f"unsupported content-type {content_type!r}"}, status_code=415)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        spans = store.add(decoded)
        if log is not None:
            traces_seen = sorted({s["trace_id"] for s in spans})
            log(f"received {len(spans)} span(s) in trace(s) {', '.join(traces_seen) or '-'}: "
                + ", ".join(s["name"] for s in spans))
        if delay > 0:
            await asyncio.sleep(delay)
        if status >= 300:
            return JSONResponse({"error": f"configured to answer {status}"}, status_code=status)
        if content_type.split(";")[0].strip().lower() == PROTOBUF:
            return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)
        return JSONResponse({})

    async def spans(request: Request) -> Response:
        if request.method == "DELETE":
            store.clear()
            return JSONResponse({"requests": 0, "spans": []})
        return JSONResponse(store.snapshot())

    return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"]),
                             Route("/spans", spans, methods=["GET", "DELETE"])])


def bind(port: int = 0) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (`port` 0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def _server(app: Any) -> Any:
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                            timeout_graceful_shutdown=1)
    return uvicorn.Server(config)


class Receiver:
    """An in-process receiver on a background thread: `url`, `spans()`, `requests`, `stop()`."""

    def __init__(self, port: int = 0, delay: float = 0.0, status: int = 200):
        self.store = SpanStore()
        self._sock = bind(port)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = _server(create_app(self.store, delay, status))
        self._thread: threading.Thread | None = None

    def start(self) -> "Receiver":
        self._thread = threading.Thread(target=lambda: asyncio.run(self._server.serve(sockets=[self._sock])),
                                        name="otlp-receiver", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.01)
        return self

    def spans(self) -> list[dict[str, Any]]:
        return self.store.snapshot()["spans"]

    @property
    def requests(self) -> int:
        return self.store.requests

    def stop(self) -> None:
        self._server.should_exit = True
        self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(5)
        self._sock.close()

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m mur.testing.otlp_receiver [--port N] [--delay S] [--status CODE] [--quiet]`."""
    parser = argparse.ArgumentParser(prog="python -m mur.testing.otlp_receiver",
                                     description="OTLP/HTTP trace receiver on 127.0.0.1 (GET /spans lists them).")
    parser.add_argument("--port", type=int, default=4318, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--delay", type=float, default=0.0, help="answer each export after this many seconds")
    parser.add_argument("--status", type=int, default=200, help="HTTP status to answer exports with")
    parser.add_argument("--quiet", action="store_true", help="do not log received batches to stderr")
    args = parser.parse_args(argv)
    try:
        sock = bind(args.port)
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    port = sock.getsockname()[1]

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    server = _server(create_app(SpanStore(), args.delay, args.status, None if args.quiet else log))
    print(json.dumps({"url": f"http://127.0.0.1:{port}", "pid": os.getpid()}), flush=True)
    server.run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
