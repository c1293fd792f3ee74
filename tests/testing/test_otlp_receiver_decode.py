"""The receiver's decoding of OTLP/HTTP bodies (protobuf, JSON, gzip) into flat span dicts (no network)."""

from __future__ import annotations

import gzip
import json

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from mur.otel.spans import build_spans
from mur.testing.otlp_receiver import SpanStore, decode, flatten

from trace_events import SID, session_events


def test_protobuf_roundtrip_keeps_ids_parents_attributes_and_resource():
    spans = build_spans(session_events(), "hello", "0.1.0")
    body = encode_spans(spans).SerializeToString()
    flat = flatten(decode(body, "application/x-protobuf"))
    assert len(flat) == len(spans) == 9
    assert {s["trace_id"] for s in flat} == {SID[4:]}
    by_id = {s["span_id"]: s for s in flat}
    for span in flat:
        if span["name"] == "capsule.session":
            assert span["parent_span_id"] is None
        else:
            assert by_id[span["parent_span_id"]]["name"] == "capsule.session"
    shell = next(s for s in flat if s["name"] == "capsule.shell")
    assert shell["attributes"]["exit_code"] == 0 and len(shell["attributes"]["command"]) == 200
    assert shell["resource"]["service.name"] == "hello" and shell["resource"]["service.version"] == "0.1.0"
    assert shell["scope"]["name"] == "mur.session"
    failed = [s for s in flat if s["status"]["code"] == "STATUS_CODE_ERROR"]
    assert sorted(s["name"] for s in failed) == ["capsule.session", "capsule.tool_call"]
    root = next(s for s in flat if s["links"])
    assert root["links"][0]["trace_id"] == "0af7651916cd43dd8448eb211c80319c"


def test_gzip_body_is_accepted():
    body = encode_spans(build_spans(session_events())).SerializeToString()
    assert len(flatten(decode(gzip.compress(body), "application/x-protobuf", "gzip"))) == 9


def test_otlp_json_with_hex_ids():
    doc = {
        "resourceSpans": [{
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
            "scopeSpans": [{
                "scope": {"name": "manual"},
                "spans": [{
                    "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
                    "parentSpanId": "eee19b7ec3c1b173", "name": "op", "kind": 2,
                    "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": "1544712661000000000",
                    "attributes": [
                        {"key": "n", "value": {"intValue": "42"}},
                        {"key": "ok", "value": {"boolValue": True}},
                        {"key": "tags", "value": {"arrayValue": {"values": [{"stringValue": "a"}]}}},
                    ],
                }],
            }],
        }]
    }
    [span] = flatten(decode(json.dumps(doc).encode(), "application/json; charset=utf-8"))
    assert (span["trace_id"], span["span_id"], span["parent_span_id"]) == (
        "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert span["kind"] == "SPAN_KIND_SERVER" and span["start_time_unix_nano"] == 1544712660000000000
    assert span["attributes"] == {"n": 42, "ok": True, "tags": ["a"]}
    assert span["resource"] == {"service.name": "svc"} and span["scope"]["name"] == "manual"


@pytest.mark.parametrize(
    "body, content_type, error",
    [
        (b"\xff\xff\xff", "application/x-protobuf", ValueError),
        (b"{not json", "application/json", ValueError),
        (b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}', "application/json", ValueError),
        (b"hello", "text/plain", LookupError),
    ],
)
def test_bad_bodies_are_refused(body, content_type, error):
    with pytest.raises(error):
        decode(body, content_type)


def test_store_counts_requests_and_clears():
    store = SpanStore()
    request = decode(encode_spans(build_spans(session_events())).SerializeToString(), "application/x-protobuf")
    store.add(request)
    store.add(request)
    snap = store.snapshot()
    assert (snap["requests"], len(snap["spans"])) == (2, 18)
    store.clear()
    assert store.snapshot() == {"requests": 0, "spans": []}
