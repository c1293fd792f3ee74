"""One shared Linker per engine, a fresh Store and instance per call: nothing of call A reaches call B.

The linker's host imports read each call's grants from the Store they are called with (its
CallContext), so these tests alternate calls with different grants on one engine, and check that
guest state (a Python module global, a wasm global, linear memory) starts fresh every call and
that limits still fire on the reused linker.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

import mur.wasm.linker as linker_mod
from mur.errors import MurError
from mur.manifest.capsule import Limits
from mur.manifest.network import parse_allow_list
from mur.wasm.callcontext import call_context
from mur.wasm.host import GuestConfig, WasmHost
from mur.wasm.limits import GuestError
from mur.wasm.linker import shared_linker
from mur.wasm.types import ToolInput

COUNTER_WAT = Path(__file__).parent / "guests" / "counter" / "counter.wat"


def call(host, cfg, **req) -> dict:
    result = host.call_tool(cfg, ToolInput(json.dumps(req)))
    assert result.status == "passed", result
    return json.loads(result.data)


@pytest.fixture(scope="session")
def counter_wasm(tmp_path_factory) -> Path:
    """The hand-written counter component (no interpreter: its state is exactly a global and memory)."""
    from wasmtime import wat2wasm

    path = tmp_path_factory.mktemp("counter") / "counter.wasm"
    path.write_bytes(wat2wasm(COUNTER_WAT.read_text()))
    return path


def counter_cfg(wasm: Path, **kw) -> GuestConfig:
    kw.setdefault("limits", Limits(deadline_seconds=20))
    return GuestConfig(wasm_path=wasm, label="counter", preopen=None, env=[], **kw)


# --- guest state -----------------------------------------------------------------------------


def test_python_module_global_is_fresh_every_call(host, make_cfg, probe_wasm):
    cfg = make_cfg(probe_wasm)
    assert call(host, cfg, op="count", tag="a") == {"calls": ["a"]}
    assert call(host, cfg, op="count", tag="b") == {"calls": ["b"]}  # not ["a", "b"]


def test_wasm_global_and_memory_are_fresh_every_call(host, counter_wasm):
    cfg = counter_cfg(counter_wasm)
    payload = "x" * 1024
    for _ in range(3):
        result = host.call_tool(cfg, ToolInput(payload))
        assert result.summary == "g1m1", result  # calls counted in a global / in memory: 1 each time
        assert result.data == payload


# --- grants ----------------------------------------------------------------------------------


def test_env_and_filesystem_of_one_call_are_not_visible_to_the_next(host, make_cfg, probe_wasm, tmp_path):
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir(), b_dir.mkdir()
    (a_dir / "secret.txt").write_text("a's file")
    a = make_cfg(probe_wasm, preopen=a_dir, env=[("ONLY_A", "1")])
    b = make_cfg(probe_wasm, preopen=b_dir, env=[("ONLY_B", "1")])
    nofs = make_cfg(probe_wasm, preopen=None)
    for _ in range(2):  # interleaved on one host and engine, so one linker serves all three
        assert call(host, a, op="env") == {"ONLY_A": "1"}
        assert call(host, a, op="read", path="secret.txt") == {"ok": True, "text": "a's file"}
        assert call(host, b, op="env") == {"ONLY_B": "1"}
        assert call(host, b, op="read", path="secret.txt")["ok"] is False
        assert call(host, b, op="listdir", path=".") == {"ok": True, "entries": []}
        assert call(host, nofs, op="read", path="secret.txt")["ok"] is False


def test_network_allow_of_one_call_does_not_carry_over(host, make_cfg, probe_wasm, http_server):
    port = http_server.server_address[1]
    url = f"http://127.0.0.1:{port}/x"
    allowed = make_cfg(probe_wasm, http_allow=parse_allow_list([f"127.0.0.1:{port}"]))
    denied = make_cfg(probe_wasm, http_allow=[])
    assert call(host, allowed, op="http", url=url)["ok"] is True
    assert call(host, denied, op="http", url=url) == {
        "ok": False, "error": f"network policy: '{url}' not in capabilities.network.allow"}
    assert call(host, allowed, op="http", url=url)["ok"] is True
    assert http_server.hits == ["/x", "/x"]


def test_hosts_sharing_an_engine_keep_their_own_shell_grant(engine, make_cfg, probe_wasm):
    granted = WasmHost(engine=engine, shell=lambda binary, args, env: {"exit_code": 0, "stdout": "ran"})
    refused = WasmHost(engine=engine)
    cfg = make_cfg(probe_wasm)
    assert call(granted, cfg, op="shell", binary="echo") == {"ok": True, "exit_code": 0, "stdout": "ran"}
    assert call(refused, cfg, op="shell", binary="echo") == {"ok": False, "error": "shell capability not granted"}
    assert call(granted, cfg, op="shell", binary="echo")["ok"] is True


def test_concurrent_calls_each_see_their_own_grants(host, make_cfg, probe_wasm):
    seen: dict[str, list] = {"a": [], "b": []}

    def worker(name: str) -> None:
        cfg = make_cfg(probe_wasm, env=[("WHO", name)])
        for _ in range(4):
            seen[name].append(call(host, cfg, op="env"))

    threads = [threading.Thread(target=worker, args=(n,)) for n in seen]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": [{"WHO": "a"}] * 4, "b": [{"WHO": "b"}] * 4}


def test_a_store_without_a_call_context_gets_no_host_import(engine, counter_wasm):
    from wasmtime import Store

    with pytest.raises(MurError) as info:
        call_context(Store(engine.engine))
    assert info.value.code == "E-RUN-001"


def test_calls_reuse_one_linker(engine, host, counter_wasm, monkeypatch):
    cfg = counter_cfg(counter_wasm)
    host.call_tool(cfg, ToolInput("warm"))
    first = shared_linker(engine.engine)

    def no_new_linker(_engine):
        raise AssertionError("a call built a linker")

    monkeypatch.setattr(linker_mod, "build_linker", no_new_linker)
    assert host.call_tool(cfg, ToolInput("again")).data == "again"
    assert shared_linker(engine.engine) is first


# --- limits on the reused linker -------------------------------------------------------------


def test_deadline_fires_between_ordinary_calls(host, counter_wasm):
    cfg = counter_cfg(counter_wasm, limits=Limits(deadline_seconds=1))
    assert host.call_tool(cfg, ToolInput("before")).summary == "g1m1"
    with pytest.raises(GuestError) as info:
        host.call_tool(cfg, ToolInput("loop"))
    assert info.value.limit == "deadline_seconds"
    assert host.call_tool(cfg, ToolInput("after")).summary == "g1m1"


def test_memory_limits_fire_between_ordinary_calls(host, make_cfg, probe_wasm, counter_wasm):
    probe = make_cfg(probe_wasm, limits=Limits(memory_bytes=64 * 1024 * 1024))
    assert call(host, probe, op="alloc", mb=1) == {"allocated_mb": 1}
    with pytest.raises(GuestError) as info:
        call(host, probe, op="alloc")  # grows until the store refuses
    assert info.value.limit == "memory_bytes"
    assert call(host, probe, op="alloc", mb=1) == {"allocated_mb": 1}  # a fresh store, a fresh budget

    tiny = counter_cfg(counter_wasm, limits=Limits(memory_bytes=1024))  # below its one 64 KiB page
    with pytest.raises(GuestError) as info:
        host.call_tool(tiny, ToolInput("x"))
    assert info.value.limit == "memory_bytes"
    assert host.call_tool(counter_cfg(counter_wasm), ToolInput("x")).summary == "g1m1"
