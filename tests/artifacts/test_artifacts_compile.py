"""`mur build`, `mur install` and `mur publish` compile the artifact's component into the engine cache
(real wasmtime, a tiny real component), report it on stderr and in --json, and --no-compile skips it."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from mur.wasm.engine import WasmEngine


@pytest.fixture
def fresh(isolated, monkeypatch):
    """A fresh HOME whose engine cache is empty (MUR_CACHE_DIR would point elsewhere)."""
    monkeypatch.delenv("MUR_CACHE_DIR", raising=False)
    return isolated


def _component() -> bytes:
    from wasmtime import wat2wasm

    return bytes(wat2wasm("""
(component
  (core module $m (func (export "f") (result i32) i32.const 42))
  (core instance $i (instantiate $m))
  (func (export "value") (result u32) (canon lift (core func $i "f"))))"""))


def _tool_dir(root: Path, wasm: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "murmur.yaml").write_text('name: t\nversion: "0.1.0"\nruntime: tool\nrequires_files: [t.wasm]\n')
    (root / "t.wasm").write_bytes(wasm)
    return root


def _entries() -> list[str]:
    cache = WasmEngine().cache_dir
    return sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []


def _entry_for(wasm: bytes) -> str:
    return WasmEngine().cache_path(hashlib.sha256(wasm).hexdigest()).name


def test_build_compiles_the_packed_component_then_finds_it_cached(fresh, mur):
    wasm = _component()
    _tool_dir(Path("src"), wasm)
    result = mur("build", "src", "--json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    assert out["artifact"] == "src/t-0.1.0.mur.zip"
    assert [(c["label"], c["status"], c["sha256"]) for c in out["compiled"]] == [
        ("t@0.1.0", "compiled", hashlib.sha256(wasm).hexdigest())]
    assert _entries() == [_entry_for(wasm)] and Path(out["compiled"][0]["cache_file"]).name == _entry_for(wasm)
    assert result.err.splitlines()[0] == "· compiling 1 component (t@0.1.0)"
    assert result.err.splitlines()[1].startswith("  compiled t@0.1.0 (")

    again = mur("build", "src", "--json")
    assert [c["status"] for c in json.loads(again.out)["compiled"]] == ["cached"]
    assert again.err == ""  # nothing to compile: nothing said
    plain = mur("build", "src")
    assert (plain.code, plain.out, plain.err) == (0, "Built artifact: src/t-0.1.0.mur.zip\n", "")


def test_no_compile_leaves_the_cache_alone(fresh, mur):
    _tool_dir(Path("src"), _component())
    result = mur("build", "src", "--no-compile", "--json")
    assert result.code == 0 and json.loads(result.out)["compiled"] == [] and result.err == ""
    assert _entries() == []
    installed = mur("install", "-g", "src/t-0.1.0.mur.zip", "--no-compile", "--json")
    assert installed.code == 0 and json.loads(installed.out)["compiled"] == []
    assert _entries() == []


def test_install_of_a_zip_compiles_what_run_loads(fresh, mur):
    """The entry is keyed by the zip's root wasm: the bytes `mur run` extracts and loads."""
    wasm = _component()
    _tool_dir(Path("src"), wasm)
    assert mur("build", "src", "--no-compile").code == 0
    result = mur("install", "-g", "src/t-0.1.0.mur.zip", "--json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    assert (out["name"], out["version"]) == ("t", "0.1.0")
    assert [c["status"] for c in out["compiled"]] == ["compiled"]
    with zipfile.ZipFile(out["path"]) as zf:
        assert _entries() == [_entry_for(zf.read("t.wasm"))] == [_entry_for(wasm)]
    text = mur("install", "-g", "src/t-0.1.0.mur.zip")  # the human form is unchanged; a hit is silent
    assert (text.code, text.out, text.err) == (0, "Installed t@0.1.0 from src/t-0.1.0.mur.zip\n", "")


def test_publish_compiles_and_a_corrupt_entry_is_recompiled(fresh, mur):
    wasm = _component()
    _tool_dir(Path("src"), wasm)
    assert mur("build", "src", "--no-compile").code == 0
    result = mur("publish", "src/t-0.1.0.mur.zip", "--json")
    assert result.code == 0, result.err
    out = json.loads(result.out)
    assert out["artifact_id"].startswith("t@0.1.0") and [c["status"] for c in out["compiled"]] == ["compiled"]
    entry = Path(out["compiled"][0]["cache_file"])
    entry.write_bytes(b"not serialized code")
    again = mur("install", "-g", "t@0.1.0", "--registry", "local", "--json")
    assert again.code == 0, again.err
    assert [c["status"] for c in json.loads(again.out)["compiled"]] == ["compiled"]
    assert entry.stat().st_size > 1000 and _entries() == [_entry_for(wasm)]


def test_placeholder_wasm_is_packed_and_skipped_silently(fresh, mur):
    """Not a component (a core-module header): nothing to compile here; `mur run` would report it."""
    _tool_dir(Path("src"), b"\0asm\1\0\0\0")
    result = mur("build", "src", "--json")
    assert result.code == 0 and result.err == ""
    assert [(c["status"], c["detail"]) for c in json.loads(result.out)["compiled"]] == [
        ("skipped", "not a WebAssembly component")]
    assert _entries() == []
