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


HELD_CHILD = r'''
import os, sys
from pathlib import Path
from mur.wasm import engine as eng
cache, path = Path(sys.argv[1]), Path(sys.argv[2])
assert eng.hold_recent(cache) == 1 and eng.hold_recent(cache) == 0   # the second finds it held
(held,) = eng._HELD[str(cache)][1].values()
pid = os.fork()
if pid == 0:   # a capsule the host forked: loads nothing, compiles nothing
    from wasmtime.component import Component
    def refuse(*a, **k):
        raise AssertionError("deserialized again")
    Component.deserialize_file = staticmethod(refuse)
    e = eng.WasmEngine(cache_dir=cache)
    from wasmtime import Store
    from wasmtime.component import Linker
    c = e.component(path)
    store = Store(e.engine); store.set_epoch_deadline(1000)
    seven = Linker(e.engine).instantiate(store, c).get_func(store, "seven")(store)
    fast = eng.WasmEngine(cache_dir=cache, tier=eng.FAST)   # another tier: its own engine
    ok = seven == 7 and c is held and e.stats["disk_hits"] == 1 and fast.engine is not e.engine
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
'''


def test_a_capsule_forked_by_the_host_takes_the_components_it_holds(tiny, tmp_path):
    cache = tmp_path / "cache"
    WasmEngine(cache_dir=cache).component(tiny)  # compiled into the cache (optimized)
    run = subprocess.run([sys.executable, "-c", HELD_CHILD, str(cache), str(tiny)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


def test_only_recent_entries_of_a_private_cache_are_held(tiny, tmp_path):
    from mur.wasm import engine as eng

    cache = tmp_path / "cache"
    WasmEngine(cache_dir=cache).component(tiny)
    entry = WasmEngine(cache_dir=cache).cache_path(file_sha256(tiny))
    os.utime(entry, (0, 0))  # used long ago
    assert eng.hold_recent(cache) == 0
    os.utime(entry)
    cache.chmod(0o777)  # others could have written it: never loaded
    try:
        assert eng.hold_recent(cache) == 0
    finally:
        cache.chmod(0o700)
        eng._HELD.pop(str(cache), None)
    missing = tmp_path / "never-used"  # a host in a HOME that never compiled: nothing held, nothing made
    assert eng.hold_recent(missing) == 0 and not missing.exists()
