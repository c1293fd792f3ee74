"""What a real guest can and cannot reach: files outside its preopen, host env, hosts, sockets."""

from __future__ import annotations

import json
import os
import socket

import pytest

from mur.manifest.network import parse_allow_list
from mur.wasm.env import guest_env
from mur.wasm.types import ToolInput


def call(host, cfg, **req) -> dict:
    result = host.call_tool(cfg, ToolInput(json.dumps(req)))
    assert result.status == "passed", result
    return json.loads(result.data)


# --- filesystem ------------------------------------------------------------------------------


@pytest.fixture
def fs_layout(make_cfg, tmp_path):
    (make_cfg.work / "inside.txt").write_text("inside")
    (tmp_path / "outside.txt").write_text("outside secret")
    os.symlink(tmp_path / "outside.txt", make_cfg.work / "link-out.txt")
    return tmp_path


def test_guest_reads_inside_its_preopen(host, make_cfg, probe_wasm, fs_layout):
    got = call(host, make_cfg(probe_wasm), op="read", path="inside.txt")
    assert got == {"ok": True, "text": "inside"}


@pytest.mark.parametrize("path", ["/etc/passwd", "../outside.txt", "./../outside.txt", "link-out.txt",
                                  "/outside.txt"])
def test_guest_cannot_read_outside_its_preopen(host, make_cfg, probe_wasm, fs_layout, path):
    got = call(host, make_cfg(probe_wasm), op="read", path=path)
    assert got["ok"] is False, got
    assert "outside secret" not in json.dumps(got)


def test_guest_cannot_read_host_absolute_path_of_a_file_outside(host, make_cfg, probe_wasm, fs_layout):
    got = call(host, make_cfg(probe_wasm), op="read", path=str(fs_layout / "outside.txt"))
    assert got["ok"] is False


def test_guest_root_listing_shows_only_the_preopen(host, make_cfg, probe_wasm, fs_layout):
    got = call(host, make_cfg(probe_wasm), op="listdir", path=".")
    assert got == {"ok": True, "entries": ["inside.txt", "link-out.txt"]}
    # wasi-libc resolves absolute paths against the preopens it has: the guest's "/" is its preopen.
    assert call(host, make_cfg(probe_wasm), op="listdir", path="/") == got


def test_guest_writes_inside_but_not_outside(host, make_cfg, probe_wasm, fs_layout):
    cfg = make_cfg(probe_wasm)
    assert call(host, cfg, op="write", path="made.txt", text="hi") == {"ok": True}
    assert (make_cfg.work / "made.txt").read_text() == "hi"
    assert call(host, cfg, op="write", path="../escaped.txt")["ok"] is False
    assert not (fs_layout / "escaped.txt").exists()


def test_no_preopen_means_no_filesystem(host, make_cfg, probe_wasm, fs_layout):
    got = call(host, make_cfg(probe_wasm, preopen=None), op="read", path="inside.txt")
    assert got["ok"] is False


def test_scope_subtree_is_the_guests_whole_world(host, make_cfg, probe_wasm, fs_layout):
    scope = make_cfg.work / "cache"
    scope.mkdir()
    (scope / "c.txt").write_text("scoped")
    cfg = make_cfg(probe_wasm, preopen=scope)
    assert call(host, cfg, op="read", path="c.txt") == {"ok": True, "text": "scoped"}
    assert call(host, cfg, op="read", path="../inside.txt")["ok"] is False


# --- environment -----------------------------------------------------------------------------


def test_guest_sees_only_allowed_noncredential_env_plus_murmur_vars(host, make_cfg, probe_wasm, monkeypatch):
    for name, value in {
        "SECRET_TOKEN": "s1", "AWS_X": "s2", "ANTHROPIC_API_KEY": "s3", "UNDECLARED": "u",
        "ALLOWED_A": "a", "STRIPPED_B": "b", "DB_PASSWORD": "s4",
    }.items():
        monkeypatch.setenv(name, value)
    env = guest_env(
        ["ALLOWED_A", "SECRET_TOKEN", "AWS_X", "ANTHROPIC_API_KEY", "STRIPPED_B", "DB_PASSWORD", "NOT_SET"],
        ["STRIPPED_*"],
        os.environ,
        {"MURMUR_SESSION_ID": "ses_0123", "MURMUR_CAPSULE_URL": "http://localhost:1"},
    )
    seen = call(host, make_cfg(probe_wasm, env=env), op="env")
    assert seen == {"ALLOWED_A": "a", "MURMUR_SESSION_ID": "ses_0123", "MURMUR_CAPSULE_URL": "http://localhost:1"}
    assert "PATH" in os.environ and "PATH" not in seen  # the host env is never inherited


# --- outbound HTTP ---------------------------------------------------------------------------


def test_allowed_loopback_host_is_reached_and_traced(host, make_cfg, probe_wasm, http_server):
    port = http_server.server_address[1]
    events = []
    cfg = make_cfg(probe_wasm, http_allow=parse_allow_list([f"127.0.0.1:{port}"]), on_http=events.append)
    got = call(host, cfg, op="http", url=f"http://127.0.0.1:{port}/hello")
    assert got == {"ok": True, "status": 200, "body": "hello from /hello"}
    assert http_server.hits == ["/hello"]
    assert events[0]["allowed"] is True and events[0]["status"] == 200
    assert events[0]["url"] == f"http://127.0.0.1:{port}/hello" and events[0]["method"] == "GET"


@pytest.mark.parametrize("allow", [[], ["127.0.0.1:1"], ["localhost"], ["https://127.0.0.1"]])
def test_undeclared_host_is_refused_reported_and_never_contacted(host, make_cfg, probe_wasm, http_server, allow):
    port = http_server.server_address[1]
    events = []
    cfg = make_cfg(probe_wasm, http_allow=parse_allow_list(allow), on_http=events.append)
    url = f"http://127.0.0.1:{port}/secret"
    got = call(host, cfg, op="http", url=url)
    assert got == {"ok": False, "error": f"network policy: '{url}' not in capabilities.network.allow"}
    assert http_server.hits == []
    assert events == [{"url": url, "method": "GET", "allowed": False, "error": got["error"]}]


def test_redirects_are_not_followed(host, make_cfg, probe_wasm, tmp_path):
    import httpx

    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "http://elsewhere.example/"})

    cfg = make_cfg(probe_wasm, http_allow=parse_allow_list(["api.example.com"]),
                   http_transport=httpx.MockTransport(handler))
    got = call(host, cfg, op="http", url="http://api.example.com/start")
    assert got["status"] == 302 and seen == ["http://api.example.com/start"]


# --- raw sockets -----------------------------------------------------------------------------


def test_raw_wasi_sockets_cannot_reach_a_loopback_listener(host, make_cfg, sockets_wasm, tcp_listener):
    port = tcp_listener.getsockname()[1]
    got = call(host, make_cfg(sockets_wasm), port=port)
    assert got["connected"] is False, got
    assert got["error"] == "ErrorCode.ACCESS_DENIED"
    with pytest.raises(socket.timeout):
        tcp_listener.accept()
