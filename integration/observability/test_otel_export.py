"""OtelExporter against a real OTLP/HTTP receiver process on 127.0.0.1: arrival, failure, slowness."""

from __future__ import annotations

import gzip
import json
import time

import httpx
from otel_support import SID, session_events

from mur.otel.exporter import OtelExporter
from mur.otel.spans import build_spans


def exporter_for(url: str, tmp_path, timeout: float = 5.0, **kw) -> OtelExporter:
    exporter = OtelExporter(url, service_name="demo", service_version="2.3.4",
                            log_path=tmp_path / "logs" / "otel.log", timeout=timeout, **kw)
    for event in session_events():
        exporter.on_event(event)
    return exporter


def test_spans_arrive_in_one_batch_with_names_attributes_parents_and_one_trace_id(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("MURMUR_FORMATION_ID", "frm_0042")
    rx = receiver()
    exporter = exporter_for(rx.url, tmp_path)
    assert exporter.export() == 8
    got = rx.received()
    assert got["requests"] == 1
    spans = got["spans"]
    assert sorted(s["name"] for s in spans) == sorted(
        ["capsule.session"] * 2 + ["capsule.inference"] * 3
        + ["capsule.tool_call", "capsule.shell", "capsule.compaction"]
    )
    assert {s["trace_id"] for s in spans} == {SID[4:]}
    assert {(s["resource"]["service.name"], s["resource"]["service.version"]) for s in spans} == {("demo", "2.3.4")}
    roots = sorted((s for s in spans if s["name"] == "capsule.session"), key=lambda s: s["start_time_unix_nano"])
    assert [r["parent_span_id"] for r in roots] == [None, None]
    assert [r["attributes"]["exit_status"] for r in roots] == ["ok", "failed"]
    for root in roots:
        assert root["attributes"]["murmur.session_id"] == SID
        assert root["attributes"]["murmur.formation_id"] == "frm_0042"
        assert root["attributes"]["model"] == "claude-x"
    assert roots[1]["status"]["code"] == "STATUS_CODE_ERROR"
    children = {r["span_id"]: [s["name"] for s in spans if s["parent_span_id"] == r["span_id"]] for r in roots}
    assert children[roots[0]["span_id"]] == ["capsule.inference", "capsule.tool_call", "capsule.shell",
                                             "capsule.compaction", "capsule.inference"]
    assert children[roots[1]["span_id"]] == ["capsule.inference"]
    shell = next(s for s in spans if s["name"] == "capsule.shell")
    assert shell["attributes"]["command"] == ("echo " + "y" * 400)[:200]
    assert (shell["attributes"]["exit_code"], shell["attributes"]["duration_ms"]) == (0, 40)
    assert shell["end_time_unix_nano"] - shell["start_time_unix_nano"] == 40_000_000
    tool = next(s for s in spans if s["name"] == "capsule.tool_call")
    assert {k: tool["attributes"][k] for k in ("tool_name", "input_bytes", "output_bytes", "duration_ms", "status")} \
        == {"tool_name": "bash", "input_bytes": 20, "output_bytes": 40, "duration_ms": 60, "status": "ok"}
    inference = next(s for s in spans if s["name"] == "capsule.inference")
    assert {k: inference["attributes"][k] for k in ("turn", "input_tokens", "output_tokens", "decision", "tool_name")} \
        == {"turn": 0, "input_tokens": 100, "output_tokens": 20, "decision": "tool_call", "tool_name": "bash"}
    compaction = next(s for s in spans if s["name"] == "capsule.compaction")
    assert (compaction["attributes"]["tokens_before"], compaction["attributes"]["tokens_after"]) == (9000, 800)
    log = (tmp_path / "logs" / "otel.log").read_text()
    assert f"exported 8 span(s) (trace {SID[4:]})" in log
    # exported events are not sent twice
    assert exporter.export() == 0 and rx.received()["requests"] == 1


def test_endpoint_down_returns_zero_logs_and_keeps_within_the_timeout(closed_port, tmp_path):
    exporter = exporter_for(f"http://127.0.0.1:{closed_port}", tmp_path, timeout=2.0)
    began = time.monotonic()
    assert exporter.export() == 0
    assert time.monotonic() - began < 2.0 + 3.0  # bounded by the timeout (margin for a loaded CI host)
    log = (tmp_path / "logs" / "otel.log").read_text()
    assert "error: export of 8 span(s)" in log and f"127.0.0.1:{closed_port}/v1/traces failed" in log
    assert "Connection refused" in log
    assert exporter.pending == 14  # kept: a later export() may retry


def test_slow_endpoint_is_bounded_by_the_timeout(receiver, tmp_path):
    rx = receiver("--delay", "30")
    exporter = exporter_for(rx.url, tmp_path, timeout=1.0)
    began = time.monotonic()
    assert exporter.export() == 0
    elapsed = time.monotonic() - began
    assert elapsed < 1.0 + 4.0, elapsed  # far below the receiver's 30 s: bounded by the timeout
    assert rx.received()["requests"] >= 1  # the batch was sent; the answer never came in time
    assert "failed" in (tmp_path / "logs" / "otel.log").read_text()


def test_collector_error_status_is_a_logged_failure(receiver, tmp_path):
    rx = receiver("--status", "400")
    exporter = exporter_for(rx.url, tmp_path, timeout=3.0)
    assert exporter.export() == 0
    assert rx.received()["requests"] == 1  # 400 is not retried
    log = (tmp_path / "logs" / "otel.log").read_text()
    assert "400" in log and "error: export of 8 span(s)" in log


def test_a_failed_export_can_be_retried(receiver, tmp_path):
    rx = receiver("--status", "400")
    exporter = exporter_for(rx.url, tmp_path, timeout=3.0)
    assert exporter.export() == 0
    exporter.url = receiver().url + "/v1/traces"  # the collector came back elsewhere
    assert exporter.export() == 8 and exporter.pending == 0


def test_receiver_accepts_otlp_json_and_gzip_and_refuses_junk(receiver):
    rx = receiver()
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]},
                              "scopeSpans": [{"scope": {"name": "s"}, "spans": [{
                                  "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
                                  "name": "json-span", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]}
    r = httpx.post(rx.url + "/v1/traces", content=json.dumps(doc), headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.json() == {}
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    body = gzip.compress(encode_spans(build_spans(session_events())).SerializeToString())
    r = httpx.post(rx.url + "/v1/traces", content=body,
                   headers={"content-type": "application/x-protobuf", "content-encoding": "gzip"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-protobuf"
    got = rx.received()
    assert got["requests"] == 2 and len(got["spans"]) == 9
    assert got["spans"][0]["name"] == "json-span" and got["spans"][0]["resource"] == {"service.name": "j"}
    assert httpx.post(rx.url + "/v1/traces", content=b"\xff\xfe",
                      headers={"content-type": "application/x-protobuf"}).status_code == 400
    assert httpx.post(rx.url + "/v1/traces", content=b"x", headers={"content-type": "text/plain"}).status_code == 415
    assert httpx.delete(rx.url + "/spans").json() == {"requests": 0, "spans": []}
    assert rx.received()["spans"] == []
