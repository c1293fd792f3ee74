"""Tiered compilation with a real engine: a session that must compile something big starts on the
fast tier (Winch), hands the optimized compile to a background process, and the next launch loads the
optimized entry; the cache keeps both, keyed by the tier's fingerprint."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from mur.wasm import engine as eng
from mur.wasm import sources, tierup
from mur.wasm.engine import FAST, OPTIMIZED, WasmEngine, engine_fingerprint

pytestmark = pytest.mark.skipif(not eng.fast_tier_available(), reason="this wasmtime has no Winch for this CPU")

# A component whose run loops until its epoch deadline: the fast tier must still be interruptible.
LOOP = """
(component
  (core module $m
    (func (export "f") (result i32) i32.const 7)
    (func (export "spin") (result i32) (loop $l (br $l)) i32.const 0))
  (core instance $i (instantiate $m))
  (func (export "seven") (result u32) (canon lift (core func $i "f")))
  (func (export "spin") (result u32) (canon lift (core func $i "spin"))))"""


@pytest.fixture
def component(tmp_path) -> Path:
    from wasmtime import wat2wasm

    path = tmp_path / "c.wasm"
    path.write_bytes(wat2wasm(LOOP))
    return path


@pytest.fixture
def big(monkeypatch):
    """Every component counts as big enough to tier (the real threshold is a megabyte)."""
    monkeypatch.setattr(eng, "TIER_MIN_BYTES", 0)
    monkeypatch.delenv(eng.TIERING_ENV, raising=False)
    started: list[list[str]] = []
    monkeypatch.setattr(tierup, "start", lambda cache, digests: started.append(list(digests)) or True)
    return started


def _call(engine: WasmEngine, path: Path, name: str, deadline: int = 1000) -> int:
    from wasmtime import Store
    from wasmtime.component import Linker

    store = Store(engine.engine)
    store.set_epoch_deadline(deadline)
    inst = Linker(engine.engine).instantiate(store, engine.component(path))
    return inst.get_func(store, name)(store)


def test_a_first_launch_runs_fast_and_hands_the_optimized_compile_on(component, tmp_path, big):
    cache = tmp_path / "cache"
    first = WasmEngine(cache_dir=cache)
    first.prepare([(component, "tool", "c")])
    digest = hashlib.sha256(component.read_bytes()).hexdigest()
    assert first.tier == FAST and _call(first, component, "seven") == 7
    assert first.cache_path(digest, FAST).is_file() and not first.cache_path(digest, OPTIMIZED).exists()
    assert big == [[digest]] and first.tier_up == [digest]
    kept = sources.kept_path(cache, digest)
    assert kept.read_bytes() == component.read_bytes() and kept.stat().st_mode & 0o777 == 0o400

    assert tierup.compile_one(cache, digest) == "compiled"  # what the background process does
    assert tierup.compile_one(cache, digest) == "present"
    later = WasmEngine(cache_dir=cache)
    later.prepare([(component, "tool", "c")])
    assert later.tier == OPTIMIZED and _call(later, component, "seven") == 7
    assert later.stats == {"compiled": 0, "disk_hits": 1, "memory_hits": 0}
    names = sorted(p.name for p in cache.iterdir() if p.suffix == ".cwasm")
    assert names == sorted(f"{digest}.{engine_fingerprint(t)}.cwasm" for t in (FAST, OPTIMIZED))  # both kept


def test_a_second_fast_launch_loads_the_fast_entry(component, tmp_path, big):
    cache = tmp_path / "cache"
    WasmEngine(cache_dir=cache).prepare([(component, "tool", "c")])
    again = WasmEngine(cache_dir=cache)
    again.prepare([(component, "tool", "c")])
    assert again.tier == FAST and _call(again, component, "seven") == 7
    assert again.stats["compiled"] == 0 and again.stats["disk_hits"] == 1


def test_the_fast_tier_keeps_epoch_deadlines(component, tmp_path, big):
    from wasmtime import Trap, WasmtimeError

    engine = WasmEngine(cache_dir=tmp_path / "cache")
    engine.prepare([(component, "tool", "c")])
    engine.start_ticker()
    try:
        with pytest.raises((Trap, WasmtimeError)):
            _call(engine, component, "spin", deadline=2)
    finally:
        engine.close()


def test_tiering_off_and_small_components_compile_optimized(component, tmp_path, big, monkeypatch):
    monkeypatch.setenv(eng.TIERING_ENV, "off")
    off = WasmEngine(cache_dir=tmp_path / "a")
    off.prepare([(component, "tool", "c")])
    monkeypatch.delenv(eng.TIERING_ENV)
    monkeypatch.setattr(eng, "TIER_MIN_BYTES", 1 << 20)
    small = WasmEngine(cache_dir=tmp_path / "b")
    small.prepare([(component, "tool", "c")])
    assert (off.tier, small.tier) == (OPTIMIZED, OPTIMIZED) and big == []


def test_the_background_compile_refuses_a_kept_source_that_does_not_match(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    digest = "ab" * 32
    sources.kept_path(cache, digest).write_bytes(b"\0asm\x0d\x00\x01\x00 not what was hashed")
    os.chmod(sources.kept_path(cache, digest), 0o400)
    assert tierup.compile_one(cache, digest) == "kept source does not match its digest"
    assert tierup.compile_one(cache, "cd" * 32) == "no kept source"
    assert [p.name for p in cache.iterdir() if p.suffix == ".cwasm"] == []


def test_the_background_process_writes_the_optimized_entry(component, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    data = component.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    sources.keep(cache, data, digest)
    assert tierup.start(cache, [digest])
    target = WasmEngine(cache_dir=cache).cache_path(digest, OPTIMIZED)
    deadline = time.monotonic() + 120
    while not target.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert target.is_file()
    while any(p.name.startswith(tierup.LOCK_PREFIX) for p in cache.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(p.name.startswith(".") for p in cache.iterdir())  # no lock, no temp file left
