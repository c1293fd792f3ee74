"""Pure pieces of mur.wasm: env filtering, records, the registry, the HTTP gate, build helpers."""

from __future__ import annotations

import filecmp
from pathlib import Path

import httpx
import pytest

from mur.errors import MurError
from mur.manifest.network import parse_allow_list
from mur.testing.toolregistry import ToolRegistry
from mur.wasm import build
from mur.wasm.env import guest_env
from mur.wasm.http import OutboundHttp
from mur.wasm.limits import classify_call_failure, deadline_ticks
from mur.wasm.types import (
    ToolInput,
    ToolResult,
    input_from_value,
    input_to_value,
    result_from_value,
    result_to_value,
)
from mur.manifest.capsule import Limits


# --- env ------------------------------------------------------------------------------------


def test_guest_env_filters_and_orders():
    host = {"A": "1", "GITHUB_TOKEN": "t", "B_PASSWORD": "p", "LOG_LEVEL": "debug", "AWS_REGION": "eu",
            "MURMUR_SESSION_ID": "from-host"}
    env = guest_env(["LOG_LEVEL", "A", "GITHUB_TOKEN", "B_PASSWORD", "AWS_REGION", "MISSING", "A",
                     "MURMUR_SESSION_ID"], ["LOG_*"], host, {"MURMUR_SESSION_ID": "ses_1"})
    assert env == [("A", "1"), ("MURMUR_SESSION_ID", "ses_1")]


def test_murmur_vars_bypass_the_credential_backstop():
    # The runtime's own injection (spec: MURMUR_INFERENCE_API_KEY for a driver) is its choice.
    assert guest_env([], [], {}, {"MURMUR_INFERENCE_API_KEY": "k"}) == [("MURMUR_INFERENCE_API_KEY", "k")]


# --- records ---------------------------------------------------------------------------------


def test_tool_records_round_trip():
    data = ToolInput(data='{"a": 1}', log_path="logs/x.log")
    assert input_from_value(input_to_value(data)) == data
    res = ToolResult("failed", "s", "d", "out/p", True, [("state_effect", "read"), ("resource_id", "r")])
    assert result_from_value(result_to_value(res)) == res
    assert getattr(input_to_value(data), "log-path") == "logs/x.log"
    assert res.meta("resource_id") == "r" and res.meta("nope") is None
    assert res.to_json()["data_path"] == "out/p"


def test_bad_status_is_rejected():
    with pytest.raises(ValueError):
        result_to_value(ToolResult("ok"))


# --- registry --------------------------------------------------------------------------------


def test_registry_dispatch_and_unknown_tool():
    seen = []
    reg = ToolRegistry(on_call=seen.append)
    reg.register("echo", lambda data: ToolResult("passed", data=data.data))
    assert reg.invoke("echo", ToolInput("x")).data == "x"
    with pytest.raises(MurError) as info:
        reg.invoke("nope", ToolInput())
    assert info.value.code == "E-RUN-008" and "declared tools: echo" in info.value.message
    assert [(c.name, c.error is None) for c in seen] == [("echo", True), ("nope", False)]
    assert "echo" in reg and reg.names() == ["echo"]


# --- HTTP gate ---------------------------------------------------------------------------------


def _gate(allow, handler, events=None, **kw):
    return OutboundHttp(parse_allow_list(allow), on_http=(events.append if events is not None else None),
                        transport=httpx.MockTransport(handler), **kw)


def test_gate_passes_allowed_request_with_method_headers_body():
    got = {}

    def handler(request):
        got.update(method=request.method, body=request.content, h=request.headers.get("x-k"),
                   host=request.headers.get("host"))
        return httpx.Response(201, headers={"x-r": "1"}, content=b"done")

    out = _gate(["https://api.example.com"], handler).send(
        "post", "https://api.example.com/v1", [("X-K", "v"), ("Host", "evil.example")], b"payload")
    assert out["status"] == 201 and out["body"] == b"done" and ("x-r", "1") in out["headers"]
    assert got == {"method": "POST", "body": b"payload", "h": "v", "host": "api.example.com"}


@pytest.mark.parametrize("url", ["http://api.example.com/", "https://api.example.com:8443/",
                                 "https://other.example.com/", "ftp://api.example.com/", "not a url"])
def test_gate_refuses_what_the_allow_list_does_not_cover(url):
    events = []
    out = _gate(["https://api.example.com"], lambda r: pytest.fail("must not connect"), events).send("GET", url, [], None)
    assert out == f"network policy: '{url}' not in capabilities.network.allow"
    assert events[0]["allowed"] is False


def test_gate_redacts_user_info_and_rejects_odd_methods():
    events = []
    out = _gate([], lambda r: None, events).send("GET", "https://u:pw@x.example/", [], None)
    assert "pw" not in out and "pw" not in str(events)
    assert _gate(["x.example"], lambda r: None).send("TRACE", "http://x.example/", [], None).startswith(
        "unsupported method")


def test_gate_caps_response_size_and_reports_transport_errors():
    big = _gate(["x.example"], lambda r: httpx.Response(200, content=b"a" * 100), max_response_bytes=10)
    assert big.send("GET", "http://x.example/", [], None) == "response body exceeds 10 bytes"

    def boom(request):
        raise httpx.ConnectError("refused", request=request)

    events = []
    out = _gate(["x.example"], boom, events).send("GET", "http://x.example/", [], None)
    assert out.startswith("http error: ConnectError") and events[0]["error"] == out


# --- limits ------------------------------------------------------------------------------------


def test_deadline_ticks_never_zero():
    assert deadline_ticks(0.0001) == 1 and deadline_ticks(1) == 100


def test_oom_evidence_from_a_rust_guest_names_the_request():
    err = classify_call_failure(Exception("wasm trap: wasm `unreachable` instruction executed"), kind="tool",
                                label="t", limits=Limits(memory_bytes=1024),
                                stderr="memory allocation of 4096 bytes failed\n")
    assert err.limit == "memory_bytes" and "it asked for 4096 more bytes" in err.message


# --- build -------------------------------------------------------------------------------------


def test_guest_target_from_manifests(tmp_path):
    (tmp_path / "murmur.yaml").write_text("name: cap\nversion: '1'\nartifacts: []\n")
    assert build.guest_target(tmp_path) == ("capsule", "capsule.wasm")
    (tmp_path / "murmur.yaml").write_text("name: t\nversion: '1'\nruntime: driver\nrequires_files: [d.wasm, x.json]\n")
    assert build.guest_target(tmp_path) == ("driver", "d.wasm")
    (tmp_path / "murmur.yaml").write_text("name: h\nversion: '1'\nruntime: hook\n")
    assert build.guest_target(tmp_path) == ("hook", "h.wasm")
    (tmp_path / "murmur.yaml").write_text("name: s\nversion: '1'\nruntime: skill\n")
    with pytest.raises(MurError):
        build.guest_target(tmp_path)


def test_build_key_tracks_sources_and_ignores_nested_guests(tmp_path):
    (tmp_path / "app.py").write_text("x = 1\n")
    nested = tmp_path / "tool"
    nested.mkdir()
    (nested / "app.py").write_text("y = 1\n")
    (nested / "murmur.yaml").write_text("name: tool\n")
    wit = build.wit_dir_for("capsule")
    key = build.build_key(tmp_path, "capsule", wit)
    (nested / "app.py").write_text("y = 2\n")
    (tmp_path / "capsule.wasm").write_bytes(b"output")
    assert build.build_key(tmp_path, "capsule", wit) == key
    (tmp_path / "app.py").write_text("x = 2\n")
    assert build.build_key(tmp_path, "capsule", wit) != key
    assert build.build_key(tmp_path, "tool", wit) != build.build_key(tmp_path, "capsule", wit)


def test_find_guest_dirs(tmp_path):
    for d in ("a", "a/b", "c"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    for d in ("a", "a/b"):
        (tmp_path / d / "murmur.yaml").write_text("name: x\n")
        (tmp_path / d / "app.py").write_text("")
    (tmp_path / "c" / "murmur.yaml").write_text("name: c\n")
    assert build.find_guest_dirs(tmp_path) == [tmp_path / "a", tmp_path / "a/b"]


def test_unknown_world_is_a_build_error():
    with pytest.raises(MurError) as info:
        build.wit_dir_for("agent")
    assert info.value.code == "E-BLD-010"


def test_hook_and_guest_copies_of_the_http_wit_agree():
    wit = Path(build.WIT_ROOT)
    assert filecmp.cmp(wit / "guest/deps/murmur-http/outbound.wit", wit / "hook/deps/murmur-http/outbound.wit",
                       shallow=False)
