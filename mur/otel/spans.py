"""trace.jsonl events -> OTel span tree (pure; nothing is sent). The exporter is mur.otel.exporter.

Spans (manifest spec, "OTel span emission"):

  capsule.session     session_start .. session_end   (root; model, exit_status, murmur.session_id)
  capsule.inference   inference                      (turn, input_tokens, output_tokens, decision, tool_name)
  capsule.tool_call   tool_call                      (tool_name, input_bytes, output_bytes, duration_ms, status)
  capsule.shell       shell                          (command first 200 chars, exit_code, duration_ms)
  capsule.compaction  compaction                     (tokens_before, tokens_after)

Resource attributes: service.name (capsule name), service.version (manifest version).

Times come from the events: tool_call and shell spans end at their timestamp and last duration_ms;
inference and compaction record no duration, so they span from the previous event of the same
attempt to their own timestamp. The root starts at session_start and ends at session_end (or its
last child, whichever is later). One session = one trace id, derived from the session id (a UUIDv7:
exactly 128 bits); every session_start/session_end pair (one per task) is its own root span.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from mur.trace import events as ev

SCOPE_NAME = "mur.session"
CHILD_EVENTS = (ev.INFERENCE, ev.TOOL_CALL, ev.SHELL, ev.COMPACTION)
COMMAND_LIMIT = 200  # spec: capsule.shell carries the command's first 200 characters
_SES = re.compile(r"ses_([0-9a-f]{32})")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_MS = 1_000_000  # ns per ms


def traces_url(endpoint: str) -> str:
    """`<otel_endpoint>/v1/traces` (an endpoint already naming /v1/traces is kept as is)."""
    base = endpoint.strip().rstrip("/")
    return base if base.endswith("/v1/traces") else base + "/v1/traces"


def trace_id_for(session_id: str) -> int:
    """The trace id of a session: its UUIDv7 bits for `ses_<32 hex>`, else a hash of the id."""
    match = _SES.fullmatch(session_id or "")
    if match and int(match.group(1), 16):
        return int(match.group(1), 16)
    return int(hashlib.sha256((session_id or "").encode()).hexdigest()[:32], 16) or 1


@dataclass
class Attempt:
    """One session_start..session_end pair and the events between them."""

    start: dict[str, Any]
    end: dict[str, Any] | None = None
    children: list[tuple[dict[str, Any], int]] = field(default_factory=list)  # (event, previous timestamp)
    task: dict[str, Any] | None = None
    links: list[str] = field(default_factory=list)  # traceparents of A2A callers
    last_ts: int = 0


class _FixedTraceId(IdGenerator):
    """Every root span of one session shares the session's trace id."""

    def __init__(self, trace_id: int):
        self._trace_id = trace_id
        self._random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        return self._random.generate_span_id()

    def generate_trace_id(self) -> int:
        return self._trace_id


class _Collect(SpanProcessor):
    """Keeps finished spans in memory; nothing is sent until export()."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def group_attempts(events: Iterable[dict[str, Any]]) -> tuple[list[Attempt], int]:
    """Group events into attempts; returns (attempts, number of child events outside any attempt)."""
    attempts: list[Attempt] = []
    current: Attempt | None = None
    task: dict[str, Any] | None = None
    callers: list[str] = []
    orphans = 0
    for event in events:
        kind = event.get("event_type")
        ts = _int(event.get("timestamp"))
        if kind == ev.TASK_START:
            task = event
        elif kind == ev.TASK_END:
            task = None
        elif kind == ev.A2A_TASK_RECEIVED and event.get("traceparent_from_caller"):
            callers.append(str(event["traceparent_from_caller"]))
        elif kind == ev.SESSION_START:
            if current is not None:  # a start without an end: the previous attempt never finished
                attempts.append(current)
            current = Attempt(start=event, task=task, links=callers, last_ts=ts)
            callers = []
            continue
        elif kind == ev.SESSION_END:
            if current is None:  # an end without a start: rebuild the start from duration_ms
                current = Attempt(start={"timestamp": ts - _int(event.get("duration_ms")), "synthetic": True},
                                   task=task)
            current.end = event
            current.last_ts = max(current.last_ts, ts)
            attempts.append(current)
            current = None
            continue
        if current is None:
            orphans += kind in CHILD_EVENTS
            continue
        if kind in CHILD_EVENTS:
            current.children.append((event, current.last_ts))
        current.last_ts = max(current.last_ts, ts)
    if current is not None:
        attempts.append(current)
    return attempts, orphans


def build_spans(
    events: Sequence[dict[str, Any]],
    service_name: str | None = None,
    service_version: str | None = None,
    formation_id: str | None = None,
    session_id: str | None = None,
) -> list[ReadableSpan]:
    """The span tree for a list of trace events (pure: nothing is sent). Roots come last."""
    attempts, _ = group_attempts(events)
    if not attempts:
        return []
    first_start = next((a.start for a in attempts if not a.start.get("synthetic")), {})
    sid = session_id or next((e.get("session_id") for e in events if e.get("session_id")), "") or ""
    resource_attrs = {"service.name": service_name or first_start.get("capsule_name") or "mur-capsule"}
    version = service_version or first_start.get("capsule_version")
    if version:
        resource_attrs["service.version"] = str(version)
    collect = _Collect()
    provider = TracerProvider(
        sampler=ALWAYS_ON,
        resource=Resource.create(resource_attrs),
        id_generator=_FixedTraceId(trace_id_for(sid)),
        shutdown_on_exit=False,
    )
    provider.add_span_processor(collect)
    tracer = provider.get_tracer(SCOPE_NAME, _mur_version())
    for attempt in attempts:
        _emit_attempt(tracer, attempt, sid, formation_id)
    return collect.spans


def _emit_attempt(tracer: Any, attempt: Attempt, session_id: str, formation_id: str | None) -> None:
    start_ms = _int(attempt.start.get("timestamp"))
    end = attempt.end or {}
    end_ms = max(_int(end.get("timestamp", attempt.last_ts)), start_ms)
    attrs: dict[str, Any] = {"murmur.session_id": session_id}
    if formation_id:
        attrs["murmur.formation_id"] = formation_id
    for key in ("model", "containment_achieved"):
        if attempt.start.get(key) is not None:
            attrs[key] = attempt.start[key]
    if attempt.end is None:
        attrs["exit_status"] = "failed"
        attrs["murmur.incomplete"] = True  # the trace has no session_end for this attempt
    else:
        for key in ("exit_status", "total_turns", "total_input_tokens", "total_output_tokens",
                    "total_tool_calls", "total_shell_calls", "duration_ms"):
            if end.get(key) is not None:
                attrs[key] = end[key]
    if attempt.task is not None:
        for key in ("task_id", "context_id", "source"):
            if attempt.task.get(key) is not None:
                attrs[f"murmur.{key}"] = attempt.task[key]
    root = tracer.start_span(
        "capsule.session", kind=SpanKind.INTERNAL, attributes=_clean(attrs), links=_links(attempt.links),
        start_time=start_ms * _MS,
    )
    if attrs["exit_status"] != "ok":
        root.set_status(Status(StatusCode.ERROR, str(attrs["exit_status"])))
    parent = trace_api.set_span_in_context(root)
    last_end = end_ms
    for event, previous in attempt.children:
        span_start, span_end = _child_times(event, previous, start_ms)
        last_end = max(last_end, span_end)
        name, child_attrs = _child(event)
        span = tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL, attributes=_clean(child_attrs),
                                 start_time=span_start * _MS)
        if event.get("event_type") == ev.TOOL_CALL and event.get("status") == "error":
            span.set_status(Status(StatusCode.ERROR, str(event.get("error") or "tool call failed")))  # mur's reason
        span.end(end_time=span_end * _MS)
    root.end(end_time=last_end * _MS)


def _child_times(event: dict[str, Any], previous: int, floor: int) -> tuple[int, int]:
    """(start, end) in ms: timed events end at their timestamp and last duration_ms; inference and
    compaction (no duration recorded) span from the previous event to their own timestamp."""
    end = _int(event.get("timestamp"))
    if event.get("event_type") in (ev.TOOL_CALL, ev.SHELL):
        start = end - max(_int(event.get("duration_ms")), 0)
    else:
        start = previous
    start = max(min(start, end), floor)
    return start, max(end, start)


def _child(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = event["event_type"]
    if kind == ev.INFERENCE:
        keys = ("turn", "input_tokens", "output_tokens", "decision", "tool_name", "origin", "model")
    elif kind == ev.TOOL_CALL:
        keys = ("turn", "tool_name", "input_bytes", "output_bytes", "duration_ms", "status", "state_effect")
    elif kind == ev.SHELL:
        keys = ("turn", "binary", "exit_code", "duration_ms", "stdout_bytes", "stderr_bytes", "resource_limit")
    else:
        keys = ("turn", "tokens_before", "tokens_after")
    attrs = {key: event.get(key) for key in keys}
    if kind == ev.SHELL:
        command = event.get("command")
        if isinstance(command, (list, tuple)):
            command = shlex.join(str(part) for part in command)
        attrs["command"] = None if command is None else str(command)[:COMMAND_LIMIT]
    return f"capsule.{kind}", attrs


def _links(traceparents: list[str]) -> list[Link]:
    """A2A callers that sent a W3C traceparent: linked from the root (their trace stays theirs)."""
    links = []
    for value in traceparents:
        match = _TRACEPARENT.fullmatch(value.strip().lower())
        if not match or match.group(1) == "ff" or not int(match.group(2), 16) or not int(match.group(3), 16):
            continue
        context = SpanContext(int(match.group(2), 16), int(match.group(3), 16), is_remote=True,
                              trace_flags=TraceFlags(int(match.group(4), 16) & 0x01))
        links.append(Link(context, {"murmur.link": "a2a_caller"}))
    return links


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    """OTel attribute values are str/bool/int/float (or lists of one type); None is dropped."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            out[key] = list(value)
        else:
            out[key] = str(value)
    return out


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _mur_version() -> str:
    try:
        from mur import __version__

        return __version__
    except Exception:  # noqa: BLE001
        return "0"
