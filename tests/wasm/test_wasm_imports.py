"""The murmur:* host imports, exercised from real guests."""

from __future__ import annotations

import json

import pytest

from mur.errors import MurError
from mur.testing.toolregistry import ToolRegistry
from mur.wasm.host import WasmHost
from mur.wasm.limits import GuestError
from mur.wasm.linker import NO_SHELL, NO_TASK
from mur.wasm.types import ToolInput


def call(host, cfg, **req) -> dict:
    result = host.call_tool(cfg, ToolInput(json.dumps(req)))
    assert result.status == "passed", result
    return json.loads(result.data)


def test_tool_result_fields_round_trip(host, make_cfg, probe_wasm):
    result = host.call_tool(make_cfg(probe_wasm), ToolInput(json.dumps({"op": "fail"})))
    assert (result.status, result.summary, result.data, result.metadata) == ("failed", "asked to fail", None,
                                                                             [("k", "v")])


def test_capsule_invokes_tools_through_the_registry(host, make_cfg, capsule_probe_wasm, probe_wasm):
    calls = []
    registry = ToolRegistry(on_call=calls.append)
    tool_cfg = make_cfg(probe_wasm)
    registry.register("probe", lambda data: host.call_tool(tool_cfg, data))
    registry.register("broken", lambda data: host.call_tool(tool_cfg, ToolInput('{"op": "panic"}')))
    (make_cfg.work / "task.md").write_text(json.dumps({"op": "invoke", "calls": [
        {"tool": "probe", "data": json.dumps({"op": "echo", "payload": "hi"})},
        {"tool": "nope", "data": "{}"},
        {"tool": "broken", "data": "{}"},
        {"tool": "probe", "data": json.dumps({"op": "fail"})},
    ]}))
    host.run_capsule(make_cfg(capsule_probe_wasm, label="cap"), registry.invoke)
    outcomes = json.loads((make_cfg.work / "out" / "result.txt").read_text())
    assert outcomes[0]["status"] == "passed" and json.loads(outcomes[0]["data"])["data"] == "hi"
    assert outcomes[1] == {"err": "unknown tool 'nope' (declared tools: broken, probe)"}
    assert outcomes[2]["err"].startswith("tool 'probe' trapped: ")  # a tool trap is an err, not a capsule trap
    assert outcomes[3] == {"status": "failed", "data": None, "summary": "asked to fail"}
    assert [c.name for c in calls] == ["probe", "nope", "broken", "probe"]
    assert calls[1].error.code == "E-RUN-008" and calls[2].error.code == "E-RUN-001"


def test_tool_run_import_in_a_capsule_is_a_stub(host, make_cfg, capsule_probe_wasm):
    (make_cfg.work / "task.md").write_text(json.dumps({"op": "direct-run"}))
    host.run_capsule(make_cfg(capsule_probe_wasm), lambda n, d: None)
    got = json.loads((make_cfg.work / "out" / "result.txt").read_text())
    assert got["status"] == "error" and "murmur:tool-registry/invoke" in got["summary"]


def test_shell_not_granted_reaches_the_guest_as_an_error(host, make_cfg, probe_wasm):
    assert call(host, make_cfg(probe_wasm), op="shell", binary="ls") == {"ok": False, "error": NO_SHELL}


def test_shell_callable_is_linked(engine, make_cfg, probe_wasm):
    seen = []

    def shell(binary, args, env):
        seen.append((binary, args, env))
        if binary == "forbidden":
            raise MurError("E-RUN-015", "binary 'forbidden' is not in capabilities.shell.allow")
        return {"exit_code": 3, "stdout": "out", "stderr": "", "truncated": False, "full_output_path": None}

    host = WasmHost(engine=engine, shell=shell)
    assert call(host, make_cfg(probe_wasm), op="shell", binary="jq", args=["-n", "1"]) == {
        "ok": True, "exit_code": 3, "stdout": "out"}
    assert call(host, make_cfg(probe_wasm), op="shell", binary="forbidden") == {
        "ok": False, "error": "binary 'forbidden' is not in capabilities.shell.allow"}
    assert seen[0] == ("jq", ["-n", "1"], [])


def test_request_input_outside_a_task_traps_the_tool(host, make_cfg, probe_wasm):
    with pytest.raises(GuestError) as info:
        call(host, make_cfg(probe_wasm), op="ask", prompt="which file?")
    assert info.value.kind == "trap" and info.value.limit is None
    assert info.value.message == f"tool 'probe' trapped: {NO_TASK}"


def test_request_input_inside_a_task_returns_the_reply(engine, make_cfg, probe_wasm):
    host = WasmHost(engine=engine, request_input=lambda prompt: f"reply to {prompt}")
    assert call(host, make_cfg(probe_wasm), op="ask", prompt="which file?") == {"answer": "reply to which file?"}


def test_text_chunks_reach_on_chunk(engine, make_cfg, probe_wasm):
    chunks = []
    host = WasmHost(engine=engine, on_chunk=lambda kind, text: chunks.append((kind, text)))
    call(host, make_cfg(probe_wasm), op="chunks", texts=["a", "b"])
    assert chunks == [("text", "a"), ("text", "b"), ("thinking", "hmm")]
