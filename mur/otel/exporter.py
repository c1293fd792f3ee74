"""OTel export of a session's trace: collect events in memory, send one OTLP/HTTP batch at the end.

`OtelExporter.on_event` is a `TraceWriter` listener: it only appends a slim copy of the event to a
list, so the agent loop never waits on telemetry. `export()` runs once the session is over: it
builds the span tree (mur.otel.spans) and sends it in a single OTLP/HTTP (protobuf)
request with the official exporter, on a worker thread joined with a hard deadline, so an
unreachable or slow endpoint costs at most `timeout` seconds and never raises. Diagnostics go to
`<session workdir>/logs/otel.log`; trace.jsonl is written by the TraceWriter regardless.

    exporter = OtelExporter(endpoint, service_name=..., service_version=..., log_path=wd.logs / "otel.log")
    trace_writer.listeners.append(exporter.on_event)
    ...
    exporter.export()   # spans sent, or 0 (logged)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from mur.fsafe import append_text
from mur.otel.spans import build_spans, group_attempts, traces_url

__all__ = ["OtelExporter", "build_spans", "traces_url"]

# Fields never needed for spans; dropped on arrival so a long session does not hold tool I/O in memory.
_HEAVY = ("input", "output", "system_prompt", "effective_grants", "tools_declared")


class _ThreadLogHandler(logging.Handler):
    """Routes the OTel exporter's own log records (from one worker thread) into otel.log."""

    def __init__(self, sink: Any, thread_id: int):
        super().__init__(logging.DEBUG)
        self._sink = sink
        self._thread_id = thread_id

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self._thread_id:
            self._sink((record.levelname.lower(), record.getMessage()))


class OtelExporter:
    """Collects a session's trace events (a TraceWriter listener) and exports them as one OTLP batch."""

    def __init__(
        self,
        endpoint: str | None,
        service_name: str | None = None,
        service_version: str | None = None,
        log_path: Path | str | None = None,
        timeout: float = 5.0,
        formation_id: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        self.endpoint = (endpoint or "").strip()
        self.url = traces_url(self.endpoint) if self.endpoint else ""
        self.service_name = service_name
        self.service_version = service_version
        self.log_path = Path(log_path) if log_path is not None else None
        self.timeout = max(float(timeout), 0.1)
        if formation_id is None:  # spec: the host's MURMUR_FORMATION_ID becomes murmur.formation_id
            formation_id = os.environ.get("MURMUR_FORMATION_ID") or None
        self.formation_id = formation_id
        self.headers = headers
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._export_lock = threading.Lock()
        self._closed = False

    # --- collecting (hot path: the agent loop calls this for every event) ------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        """TraceWriter listener: remember the event (a slim copy); never raises, never blocks on I/O."""
        if self._closed or not isinstance(event, dict):
            return
        slim = {k: v for k, v in event.items() if k not in _HEAVY}
        with self._lock:
            self._events.append(slim)

    @property
    def pending(self) -> int:
        """Events collected and not yet exported."""
        with self._lock:
            return len(self._events)

    def spans(self) -> list[ReadableSpan]:
        """The span tree of the events collected so far (nothing is sent)."""
        with self._lock:
            events = list(self._events)
        return build_spans(events, self.service_name, self.service_version, self.formation_id)

    # --- exporting (once, after the session) -----------------------------------------------------

    def export(self) -> int:
        """Send every pending span in one OTLP/HTTP request; returns spans sent (0 on failure, logged).

        Never raises and returns within about `timeout` seconds. Events of a failed export stay
        pending, so a later call retries them; a successful export clears them.
        """
        try:
            with self._export_lock:
                return self._export()
        except Exception as exc:  # noqa: BLE001 - telemetry must never fail the session
            self._log(f"error: export failed unexpectedly: {type(exc).__name__}: {exc}")
            return 0

    def close(self) -> int:
        """Export what is pending and stop collecting; returns spans sent."""
        sent = self.export()
        self._closed = True
        return sent

    def _export(self) -> int:
        if not self.url:
            return 0
        if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            self._log("OTEL_SDK_DISABLED=true: no spans exported")
            return 0
        with self._lock:
            events = list(self._events)
        if not events:
            self._log("nothing to export: no trace events were collected")
            return 0
        attempts, orphans = group_attempts(events)
        if orphans:
            self._log(f"warning: {orphans} event(s) outside any session_start/session_end were not exported")
        spans = build_spans(events, self.service_name, self.service_version, self.formation_id)
        if not spans:
            self._log("nothing to export: the trace has no session_start/session_end")
            return 0
        if any(a.end is None for a in attempts):
            self._log("warning: a session attempt has no session_end; exported as incomplete")
        began = time.monotonic()
        ok, reason = self._send(spans)
        elapsed = int((time.monotonic() - began) * 1000)
        trace_hex = f"{spans[0].context.trace_id:032x}"
        if not ok:
            self._log(f"error: export of {len(spans)} span(s) (trace {trace_hex}) to {self.url} failed "
                      f"after {elapsed} ms: {reason}")
            return 0
        with self._lock:
            del self._events[: len(events)]
        self._log(f"exported {len(spans)} span(s) (trace {trace_hex}) to {self.url} in {elapsed} ms")
        return len(spans)

    def _send(self, spans: list[ReadableSpan]) -> tuple[bool, str]:
        """One export on a daemon thread joined with a hard deadline: (ok, reason)."""
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult

        messages: list[tuple[str, str]] = []
        outcome: dict[str, Any] = {}
        exporter = OTLPSpanExporter(endpoint=self.url, timeout=self.timeout, headers=self.headers)

        def work() -> None:
            otel_logger = logging.getLogger("opentelemetry")
            handler = _ThreadLogHandler(messages.append, threading.get_ident())
            otel_logger.addHandler(handler)
            try:
                outcome["result"] = exporter.export(spans)
            except Exception as exc:  # noqa: BLE001
                outcome["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                otel_logger.removeHandler(handler)

        worker = threading.Thread(target=work, name="mur-otel-export", daemon=True)
        worker.start()
        # The exporter's own deadline is `timeout`; the join is the guarantee if a socket misbehaves.
        worker.join(self.timeout + 0.25)
        for level, message in messages:
            self._log(f"{level}: exporter: {message}")
        if worker.is_alive():
            try:
                exporter.shutdown()  # aborts a pending retry backoff; the daemon thread is abandoned
            except Exception:  # noqa: BLE001
                pass
            return False, f"no answer within the {self.timeout:g}s timeout"
        try:
            exporter.shutdown()
        except Exception:  # noqa: BLE001
            pass
        if outcome.get("result") == SpanExportResult.SUCCESS:
            return True, ""
        return False, outcome.get("error") or (messages[-1][1] if messages else "the exporter reported failure")

    def _log(self, message: str) -> None:
        if self.log_path is None:
            return
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            append_text(self.log_path, f"{stamp}Z {message}\n")
        except OSError:
            pass
