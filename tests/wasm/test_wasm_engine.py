"""The compile cache: a second engine (and a second process) loads instead of recompiling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mur.wasm.engine import WasmEngine, engine_fingerprint, file_sha256

# A real (tiny) component: compiles in milliseconds, so cache behaviour is cheap to test.
WAT = """
(component
  (core module $m (func (export "f") (result i32) i32.const 7))
  (core instance $i (instantiate $m))
  (func (export "seven") (result u32) (canon lift (core func $i "f")))
)"""


@pytest.fixture
def tiny(tmp_path) -> Path:
    from wasmtime import wat2wasm

    path = tmp_path / "tiny.wasm"
    path.write_bytes(wat2wasm(WAT))
    return path


def _call_seven(engine: WasmEngine, path: Path) -> int:
    from wasmtime import Store
    from wasmtime.component import Linker

    store = Store(engine.engine)
    store.set_epoch_deadline(1000)
    inst = Linker(engine.engine).instantiate(store, engine.component(path))
    return inst.get_func(store, "seven")(store)


def test_first_engine_compiles_second_loads_from_disk(tiny, tmp_path):
    cache = tmp_path / "cache"
    first = WasmEngine(cache_dir=cache)
    assert _call_seven(first, tiny) == 7
    assert first.stats == {"compiled": 1, "disk_hits": 0, "memory_hits": 0}
    assert first.cache_path(file_sha256(tiny)).is_file()
    assert _call_seven(first, tiny) == 7
    assert first.stats["memory_hits"] == 1

    second = WasmEngine(cache_dir=cache)
    assert _call_seven(second, tiny) == 7
    assert second.stats == {"compiled": 0, "disk_hits": 1, "memory_hits": 0}


def test_a_second_process_does_not_recompile(tiny, tmp_path):
    cache = tmp_path / "cache"
    script = (
        "import json, sys; from pathlib import Path; from mur.wasm.engine import WasmEngine;"
        "e = WasmEngine(cache_dir=Path(sys.argv[1])); e.component(Path(sys.argv[2])); print(json.dumps(e.stats))"
    )
    runs = [json.loads(subprocess.run([sys.executable, "-c", script, str(cache), str(tiny)], check=True,
                                      capture_output=True, text=True).stdout) for _ in range(2)]
    assert runs[0]["compiled"] == 1 and runs[1] == {"compiled": 0, "disk_hits": 1, "memory_hits": 0}


def test_changed_wasm_is_recompiled(tiny, tmp_path):
    from wasmtime import wat2wasm

    cache = tmp_path / "cache"
    WasmEngine(cache_dir=cache).component(tiny)
    tiny.write_bytes(wat2wasm(WAT.replace("i32.const 7", "i32.const 8")))
    fresh = WasmEngine(cache_dir=cache)
    assert _call_seven(fresh, tiny) == 8 and fresh.stats["compiled"] == 1


def test_corrupt_cache_entry_is_replaced(tiny, tmp_path):
    cache = tmp_path / "cache"
    eng = WasmEngine(cache_dir=cache)
    eng.component(tiny)
    entry = eng.cache_path(file_sha256(tiny))
    entry.write_bytes(b"garbage")
    again = WasmEngine(cache_dir=cache)
    assert _call_seven(again, tiny) == 7
    assert again.stats["compiled"] == 1 and entry.stat().st_size > 100


def test_cache_dir_writable_by_others_is_not_used(tiny, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    eng = WasmEngine(cache_dir=cache)
    assert _call_seven(eng, tiny) == 7
    assert list(cache.iterdir()) == []  # nothing written where someone else could swap it


def test_cache_key_names_the_engine(tiny, tmp_path):
    eng = WasmEngine(cache_dir=tmp_path / "c")
    eng.component(tiny)
    (entry,) = (tmp_path / "c").iterdir()
    assert entry.name == f"{file_sha256(tiny)}.{engine_fingerprint()}.cwasm"
    assert oct(os.stat(tmp_path / "c").st_mode & 0o777) == "0o700"
