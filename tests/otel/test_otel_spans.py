"""trace.jsonl events -> OTel span tree: names, parents, attributes, timings, trace id (no network)."""

from __future__ import annotations

import json

from opentelemetry.trace import StatusCode

from mur.otel.exporter import OtelExporter
from mur.otel.spans import build_spans, trace_id_for, traces_url
from mur.trace.writer import TraceWriter

from trace_events import SID, T0, session_events

MS = 1_000_000


def by_name(spans, name):
    return [s for s in spans if s.name == name]


def test_span_tree_names_and_parents(events):
    spans = build_spans(events, "hello", "0.1.0")
    names = sorted(s.name for s in spans)
    assert names == sorted(
        ["capsule.session"] * 2 + ["capsule.inference"] * 3 + ["capsule.tool_call"] * 2
        + ["capsule.shell", "capsule.compaction"]
    )
    roots = by_name(spans, "capsule.session")
    assert all(r.parent is None for r in roots)
    first, second = sorted(roots, key=lambda r: r.start_time)
    children = [s for s in spans if s.name != "capsule.session"]
    assert all(s.parent is not None and s.parent.span_id in (first.context.span_id, second.context.span_id)
               for s in children)
    under_first = [s.name for s in children if s.parent.span_id == first.context.span_id]
    under_second = [s.name for s in children if s.parent.span_id == second.context.span_id]
    assert under_first == ["capsule.inference", "capsule.tool_call", "capsule.shell", "capsule.compaction",
                           "capsule.inference"]
    assert under_second == ["capsule.inference", "capsule.tool_call"]
    assert len({s.context.span_id for s in spans}) == len(spans)


def test_one_session_is_one_trace_id_taken_from_the_session_id(events):
    spans = build_spans(events, "hello", "0.1.0")
    assert {s.context.trace_id for s in spans} == {int(SID[4:], 16)}
    assert trace_id_for(SID) == int(SID[4:], 16)
    assert trace_id_for("not-a-ses-id") == trace_id_for("not-a-ses-id") != trace_id_for("other")


def test_resource_and_root_attributes(events, monkeypatch):
    monkeypatch.delenv("MURMUR_FORMATION_ID", raising=False)
    spans = build_spans(events, "hello", "0.1.0", formation_id="frm_42")
    assert {(s.resource.attributes["service.name"], s.resource.attributes["service.version"]) for s in spans} == {
        ("hello", "0.1.0")
    }
    first, second = sorted(by_name(spans, "capsule.session"), key=lambda r: r.start_time)
    a = first.attributes
    assert (a["model"], a["exit_status"], a["murmur.session_id"], a["murmur.formation_id"]) == (
        "claude-x", "ok", SID, "frm_42")
    assert (a["murmur.task_id"], a["total_turns"], a["total_input_tokens"]) == ("tsk_1", 2, 250)
    assert first.status.status_code is StatusCode.UNSET
    assert second.attributes["exit_status"] == "failed" and second.attributes["murmur.task_id"] == "tsk_2"
    assert second.status.status_code is StatusCode.ERROR
    children = [s for s in spans if s.name != "capsule.session"]
    assert all("murmur.formation_id" not in s.attributes for s in children)


def test_service_name_and_version_default_to_the_session_start():
    spans = build_spans(session_events())
    assert spans[0].resource.attributes["service.name"] == "hello"
    assert spans[0].resource.attributes["service.version"] == "0.1.0"


def test_child_attributes(events):
    spans = build_spans(events, "hello", "0.1.0")
    inference = by_name(spans, "capsule.inference")
    assert dict(inference[0].attributes) == {
        "turn": 0, "input_tokens": 100, "output_tokens": 20, "decision": "tool_call", "tool_name": "bash"}
    assert "tool_name" not in inference[1].attributes  # null in the trace: OTel has no null attribute
    tool = by_name(spans, "capsule.tool_call")
    assert dict(tool[0].attributes) == {
        "turn": 0, "tool_name": "bash", "input_bytes": 321, "output_bytes": 40, "duration_ms": 70, "status": "ok"}
    assert tool[0].status.status_code is StatusCode.UNSET
    assert tool[1].attributes["status"] == "error" and tool[1].status.status_code is StatusCode.ERROR
    [shell] = by_name(spans, "capsule.shell")
    assert shell.attributes["command"] == ("ls -la " + "x" * 300)[:200] and len(shell.attributes["command"]) == 200
    assert (shell.attributes["exit_code"], shell.attributes["duration_ms"]) == (0, 50)
    [compaction] = by_name(spans, "capsule.compaction")
    assert (compaction.attributes["tokens_before"], compaction.attributes["tokens_after"]) == (9000, 800)


def test_timings_come_from_the_events(events):
    spans = build_spans(events, "hello", "0.1.0")
    first = min(by_name(spans, "capsule.session"), key=lambda r: r.start_time)
    assert (first.start_time, first.end_time) == ((T0 + 2) * MS, (T0 + 410) * MS)
    inf0, inf1, _ = sorted(by_name(spans, "capsule.inference"), key=lambda s: s.start_time)
    assert (inf0.start_time, inf0.end_time) == ((T0 + 2) * MS, (T0 + 120) * MS)  # from session_start
    assert (inf1.start_time, inf1.end_time) == ((T0 + 260) * MS, (T0 + 400) * MS)  # from the compaction
    tool = min(by_name(spans, "capsule.tool_call"), key=lambda s: s.start_time)
    assert (tool.start_time, tool.end_time) == ((T0 + 130) * MS, (T0 + 200) * MS)  # end - duration_ms
    [shell] = by_name(spans, "capsule.shell")
    assert (shell.start_time, shell.end_time) == ((T0 + 151) * MS, (T0 + 201) * MS)
    [compaction] = by_name(spans, "capsule.compaction")
    assert (compaction.start_time, compaction.end_time) == ((T0 + 201) * MS, (T0 + 260) * MS)
    for span in spans:
        assert span.start_time <= span.end_time
        if span.parent is not None:
            root = next(r for r in spans if r.context.span_id == span.parent.span_id)
            assert root.start_time <= span.start_time and span.end_time <= root.end_time


def test_a2a_callers_traceparent_is_a_link_on_the_root(events):
    spans = build_spans(events, "hello", "0.1.0")
    first, second = sorted(by_name(spans, "capsule.session"), key=lambda r: r.start_time)
    [link] = first.links
    assert f"{link.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert f"{link.context.span_id:016x}" == "b7ad6b7169203331"
    assert not second.links


def test_an_attempt_without_session_end_is_exported_as_incomplete():
    events = [e for e in session_events() if e["timestamp"] < T0 + 1000 and e["event_type"] != "session_end"]
    spans = build_spans(events, "hello", "0.1.0")
    [root] = by_name(spans, "capsule.session")
    assert root.attributes["murmur.incomplete"] is True and root.attributes["exit_status"] == "failed"
    assert root.end_time == (T0 + 411) * MS  # the last event seen
    assert len(spans) == 6


def test_events_outside_any_attempt_make_no_span():
    stray = {"event_type": "tool_call", "session_id": SID, "timestamp": T0, "tool_name": "x", "duration_ms": 1}
    assert build_spans([stray]) == []
    spans = build_spans([stray] + session_events())
    assert len(spans) == 9


def test_traces_url():
    assert traces_url("http://localhost:4318") == "http://localhost:4318/v1/traces"
    assert traces_url("http://localhost:4318/") == "http://localhost:4318/v1/traces"
    assert traces_url(" http://c:4318/v1/traces ") == "http://c:4318/v1/traces"
    assert traces_url("https://c/otlp") == "https://c/otlp/v1/traces"


def test_exporter_is_a_trace_writer_listener_and_trace_jsonl_is_still_written(tmp_path, monkeypatch):
    monkeypatch.setenv("MURMUR_FORMATION_ID", "frm_env")
    exporter = OtelExporter("http://127.0.0.1:9", service_name="hello", service_version="0.1.0",
                            log_path=tmp_path / "logs" / "otel.log")
    writer = TraceWriter(tmp_path / "trace.jsonl", SID)
    writer.listeners.append(exporter.on_event)
    for event in session_events():
        fields = {k: v for k, v in event.items() if k not in ("event_type", "session_id", "timestamp")}
        writer.emit(event["event_type"], **fields)
    writer.close()
    lines = (tmp_path / "trace.jsonl").read_text().splitlines()
    assert len(lines) == exporter.pending == 16
    assert json.loads(lines[4])["input"]["command"].startswith("ls -la")  # the trace keeps tool input
    roots = [s for s in exporter.spans() if s.name == "capsule.session"]
    assert {r.attributes["murmur.formation_id"] for r in roots} == {"frm_env"}


def test_exporter_with_nothing_to_do_returns_zero(tmp_path):
    assert OtelExporter("", service_name="x").export() == 0
    log = tmp_path / "otel.log"
    exporter = OtelExporter("http://127.0.0.1:9", service_name="x", log_path=log)
    assert exporter.export() == 0
    assert "nothing to export" in log.read_text()
    exporter.on_event({"event_type": "inference", "timestamp": T0, "session_id": SID})
    assert exporter.export() == 0
    assert "no session_start/session_end" in log.read_text()


def test_on_event_keeps_a_slim_copy_and_ignores_junk():
    exporter = OtelExporter("http://127.0.0.1:9", service_name="x")
    event = session_events()[4]
    exporter.on_event(event)
    exporter.on_event("not an event")  # type: ignore[arg-type]
    assert exporter.pending == 1
    assert "input" in event  # the caller's dict is untouched
    assert "input" not in exporter._events[0]


def test_a_failed_tool_calls_span_status_says_why():
    events = session_events()
    failed = next(e for e in events if e["event_type"] == "tool_call" and e["status"] == "error")
    [_, span] = by_name(build_spans(events, "hello", "0.1.0"), "capsule.tool_call")
    assert span.status.description == "tool call failed"  # a trace from before `error`
    failed["error"] = "unknown tool 'nope'"
    [_, span] = by_name(build_spans(events, "hello", "0.1.0"), "capsule.tool_call")
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "unknown tool 'nope'"
