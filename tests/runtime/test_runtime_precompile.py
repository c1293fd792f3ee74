"""Deploy's cross-compile (mur.runtime.precompile) goes through the one compile path
(mur.wasm.compile.ensure_compiled): several components at once, cached by digest, engine and target,
loadable by the runtime's own engine, and a broken component is E-RUN-001 naming it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mur.errors import MurError
from mur.runtime import precompile as pc

COUNTER_WAT = Path(__file__).parents[1] / "wasm" / "guests" / "counter" / "counter.wat"


class Recording:
    def __init__(self):
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(f"note {text}")

    def step(self, text: str):
        import contextlib

        self.lines.append(f"step {text}")
        return contextlib.nullcontext()


@pytest.fixture
def plat():
    here = f"linux-{os.uname().machine}"
    if pc.supported(here):
        pytest.skip(pc.supported(here))
    return here


@pytest.fixture
def components(monkeypatch, tmp_path):
    from wasmtime import wat2wasm

    monkeypatch.setenv("MUR_CACHE_DIR", str(tmp_path / "cache"))
    counter = bytes(wat2wasm(COUNTER_WAT.read_text()))
    other = bytes(wat2wasm(COUNTER_WAT.read_text().replace("(component", "(component $other", 1)))
    assert counter != other
    return counter, other


def test_components_compile_once_each_then_come_from_the_cache(plat, components, tmp_path):
    counter, other = components
    first = Recording()
    out = pc.precompile([("tool 'a'", counter), ("tool 'b'", other), ("tool 'a again'", counter)], plat, first)
    assert [p.label for p in out] == ["tool 'a'", "tool 'b'"]  # a digest seen twice ships once
    assert first.lines[0] == "step compiling 2 components (tool 'a', tool 'b')"
    assert len(first.lines) == 3 and all(line.startswith("note compiled tool '") for line in first.lines[1:])
    cache = tmp_path / "cache" / "deploy-precompiled"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    for p in out:
        local = Path(p.file.src)
        assert local.parent == cache and local.name.endswith(f".{plat}.cwasm")
        assert p.file.rel == f"{p.wasm_sha256}.{local.name.split('.')[1]}.cwasm"  # the target engine's name
        assert stat.S_IMODE(local.stat().st_mode) == 0o600
    again = Recording()
    assert [p.file.sha256 for p in pc.precompile([("tool 'a'", counter)], plat, again)] == [out[0].file.sha256]
    assert again.lines == []  # nothing compiled


def test_the_runtime_engine_loads_what_was_precompiled(plat, components):
    from wasmtime import Engine
    from wasmtime.component import Component

    from mur.wasm.engine import engine_config

    (done,) = pc.precompile([("tool 'a'", components[0])], plat)
    Component.deserialize_file(Engine(engine_config()), done.file.src)


def test_an_older_world_readable_cache_is_made_private(plat, components, tmp_path):
    cache = tmp_path / "cache" / "deploy-precompiled"
    cache.mkdir(parents=True, mode=0o755)
    os.chmod(cache, 0o755)
    assert pc.precompile([("tool 'a'", components[0])], plat)
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700


def test_a_component_that_does_not_compile_is_named(plat, components):
    broken = components[0][:-7]  # truncated
    with pytest.raises(MurError) as err:
        pc.precompile([("tool 'a'", components[0]), ("tool 'broken'", broken)], plat)
    assert err.value.code == "E-RUN-001"
    assert err.value.message.startswith(f"tool 'broken' failed to compile for {plat}: ")
