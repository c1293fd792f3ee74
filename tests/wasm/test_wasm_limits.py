"""capabilities.limits on real guests: deadline, memory, tables, instances — and panics are not limits."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mur.manifest.capsule import Limits
from mur.wasm.limits import GuestError
from mur.wasm.types import ToolInput

MiB = 1024 * 1024


def run(host, cfg, **req):
    return host.call_tool(cfg, ToolInput(json.dumps(req)))


def test_busy_loop_is_stopped_at_its_deadline(host, make_cfg, probe_wasm):
    cfg = make_cfg(probe_wasm, limits=Limits(deadline_seconds=1))
    started = time.monotonic()
    with pytest.raises(GuestError) as info:
        run(host, cfg, op="loop")
    elapsed = time.monotonic() - started
    err = info.value
    assert err.code == "E-RUN-001" and err.kind == "limit" and err.limit == "deadline_seconds"
    assert err.message == ("tool 'probe' exceeded its 1s deadline and was interrupted "
                           "(capabilities.limits.deadline_seconds)")
    assert 0.9 <= elapsed < 10, elapsed  # stopped by the deadline, not by anything else


def test_each_call_gets_a_fresh_deadline(host, make_cfg, probe_wasm):
    cfg = make_cfg(probe_wasm, limits=Limits(deadline_seconds=1))
    for _ in range(3):  # 3 calls in a row exceed 1 s in total, none exceeds it alone
        assert run(host, cfg, op="echo", payload="x").status == "passed"
        time.sleep(0.4)


def test_capsule_deadline_uses_upstream_wording(host, make_cfg, capsule_probe_wasm):
    (make_cfg.work / "task.md").write_text(json.dumps({"op": "loop"}))
    cfg = make_cfg(capsule_probe_wasm, label="looper", limits=Limits(deadline_seconds=1))
    with pytest.raises(GuestError) as info:
        host.run_capsule(cfg, lambda name, data: None)
    assert info.value.limit == "deadline_seconds"
    assert info.value.message.startswith("capsule execution exceeded its 1s deadline and was interrupted")


def test_allocation_past_memory_bytes_names_the_limit(host, make_cfg, probe_wasm):
    cfg = make_cfg(probe_wasm, limits=Limits(memory_bytes=64 * MiB))
    with pytest.raises(GuestError) as info:
        run(host, cfg, op="alloc")
    err = info.value
    assert err.code == "E-RUN-001" and err.kind == "limit" and err.limit == "memory_bytes"
    assert "capabilities.limits.memory_bytes (67108864 bytes)" in err.message
    assert "trapped" not in err.message


def test_allocation_under_memory_bytes_succeeds(host, make_cfg, probe_wasm):
    # The control for the test above: the same guest code passes when the limit leaves room.
    cfg = make_cfg(probe_wasm, limits=Limits(memory_bytes=256 * MiB))
    result = run(host, cfg, op="alloc", mb=40)
    assert json.loads(result.data) == {"allocated_mb": 40}


def test_initial_memory_above_the_limit_fails_at_instantiation(host, make_cfg, probe_wasm):
    with pytest.raises(GuestError) as info:
        run(host, make_cfg(probe_wasm, limits=Limits(memory_bytes=1 * MiB)), op="echo")
    assert info.value.limit == "memory_bytes"
    assert "its initial linear memory is" in info.value.message


def test_table_elements_limit(host, make_cfg, probe_wasm):
    with pytest.raises(GuestError) as info:
        run(host, make_cfg(probe_wasm, limits=Limits(table_elements=10)), op="echo")
    assert info.value.code == "E-RUN-001" and info.value.limit == "table_elements"
    assert "capabilities.limits.table_elements (10)" in info.value.message


def test_instances_limit(host, make_cfg, probe_wasm):
    with pytest.raises(GuestError) as info:
        run(host, make_cfg(probe_wasm, limits=Limits(instances=3)), op="echo")
    assert info.value.code == "E-RUN-001" and info.value.limit == "instances"
    assert "capabilities.limits.instances (3)" in info.value.message


def test_guest_panic_is_a_trap_not_a_limit(host, make_cfg, probe_wasm):
    with pytest.raises(GuestError) as info:
        run(host, make_cfg(probe_wasm), op="panic")
    err = info.value
    assert err.code == "E-RUN-001" and err.kind == "trap" and err.limit is None
    assert err.message.startswith("tool 'probe' trapped: ")
    assert "RuntimeError: probe guest panicked on purpose" in err.message


def test_capsule_panic_is_trapped(host, make_cfg, capsule_probe_wasm):
    (make_cfg.work / "task.md").write_text(json.dumps({"op": "panic"}))
    with pytest.raises(GuestError) as info:
        host.run_capsule(make_cfg(capsule_probe_wasm, label="p"), lambda name, data: None)
    assert info.value.kind == "trap" and info.value.limit is None
    assert info.value.message.startswith("capsule execution trapped: ")
    assert "ValueError: capsule probe panicked on purpose" in info.value.message


def test_guest_output_goes_to_the_log(host, make_cfg, probe_wasm, tmp_path):
    log = tmp_path / "logs" / "probe.log"
    run(host, make_cfg(probe_wasm, log_path=log), op="print", text="visible line")
    with pytest.raises(GuestError):
        run(host, make_cfg(probe_wasm, log_path=log), op="panic")
    text = log.read_text()
    assert "visible line" in text and "probe guest panicked on purpose" in text


def test_missing_wasm_is_e_run_004_for_capsules_and_e_run_008_for_tools(host, make_cfg, tmp_path):
    with pytest.raises(Exception) as info:
        host.run_capsule(make_cfg(tmp_path / "nope.wasm"), lambda n, d: None)
    assert info.value.code == "E-RUN-004"
    with pytest.raises(Exception) as info:
        host.call_tool(make_cfg(tmp_path / "nope.wasm"), ToolInput())
    assert info.value.code == "E-RUN-008"


def test_invalid_wasm_is_a_compile_error(host, make_cfg, tmp_path):
    bad = tmp_path / "bad.wasm"
    bad.write_bytes(b"\0asm not really")
    with pytest.raises(GuestError) as info:
        host.call_tool(make_cfg(bad), ToolInput())
    assert info.value.code == "E-RUN-001" and info.value.kind == "compile"
    assert "failed to compile" in info.value.message


def _wat_component(tmp_path: Path, name: str, text: str) -> Path:
    from wasmtime import wat2wasm

    path = tmp_path / name
    path.write_bytes(wat2wasm(text))
    return path


def test_unlinked_import_is_e_run_002(host, make_cfg, tmp_path):
    # A component importing an interface mur does not link (wasi:keyvalue).
    wasm = _wat_component(tmp_path, "kv.wasm", """
        (component
          (import "wasi:keyvalue/store@0.2.0" (instance (export "open" (func))))
        )""")
    with pytest.raises(GuestError) as info:
        host.run_capsule(make_cfg(wasm), lambda n, d: None)
    err = info.value
    assert err.code == "E-RUN-002" and err.kind == "link"
    assert "wasi:keyvalue/store@0.2.0" in err.message
    assert "matching implementation was not found in the linker" in err.message


def test_missing_export_is_e_run_001(host, make_cfg, tmp_path):
    wasm = _wat_component(tmp_path, "empty.wasm", "(component)")
    with pytest.raises(GuestError) as info:
        host.run_capsule(make_cfg(wasm), lambda n, d: None)
    assert info.value.code == "E-RUN-001"
    assert "does not export murmur:capsule/run@0.1.0#run" in info.value.message
