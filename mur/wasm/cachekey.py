"""What names a compiled component in the cache: the engine's settings per tier, and the fingerprint
they make (`<cache>/wasm/<sha256 of the wasm>.<engine fingerprint>.cwasm`).

Serialized code only loads into an identical engine, so the fingerprint covers the wasmtime version,
the engine settings and the platform. A leaf: the engine (mur.wasm.engine), the background tier-up
(mur.wasm.tierup), `mur gc` and deploy's precompile all name entries the same way from here.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import sys
from pathlib import Path
from typing import Any, Mapping

from mur.paths import cache_root

ENGINE_SETTINGS = "component-model,epoch-interruption"
OPTIMIZED, FAST = "optimized", "fast"
TIERS = (OPTIMIZED, FAST)
_WINCH = 2  # wasmtime_strategy_t: WASMTIME_STRATEGY_WINCH (wasmtime-py's setter names only auto and cranelift)


@functools.lru_cache(maxsize=None)
def wasmtime_version() -> str:
    """The installed wasmtime-py version (also the embedded wasmtime's major version): the name of
    the dist-info directory beside the package, read with one listdir (importlib.metadata scans the
    whole path and parses METADATA: ~10 ms, once per run), else through importlib.metadata."""
    import importlib.util

    spec = importlib.util.find_spec("wasmtime")
    if spec is not None and spec.origin:
        site = os.path.dirname(os.path.dirname(spec.origin))
        try:
            names = [n for n in os.listdir(site) if n.startswith("wasmtime-") and n.endswith(".dist-info")]
        except OSError:
            names = []
        if len(names) == 1:
            return names[0][len("wasmtime-"):-len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version("wasmtime")
    except metadata.PackageNotFoundError:  # pragma: no cover - wasmtime is a hard dependency
        return "unknown"


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where compiled components are cached for a process with environment `env` (else ours)."""
    return cache_root(env) / "wasm"


@functools.lru_cache(maxsize=None)
def engine_fingerprint(tier: str = OPTIMIZED) -> str:
    settings = ENGINE_SETTINGS if tier == OPTIMIZED else f"{ENGINE_SETTINGS},winch"
    text = f"wasmtime {wasmtime_version()}; {settings}; {platform.machine()}; {sys.platform}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprints() -> dict[str, str]:
    """The fingerprint of each tier (what `mur gc` keeps)."""
    return {tier: engine_fingerprint(tier) for tier in TIERS}


def entry_path(cache_dir: Path, digest: str, tier: str = OPTIMIZED) -> Path:
    """The cache entry of the component with this sha256, compiled in this tier."""
    return cache_dir / f"{digest}.{engine_fingerprint(tier)}.cwasm"


def engine_config(tier: str = OPTIMIZED) -> Any:
    """A wasmtime Config with the runtime's settings (ENGINE_SETTINGS); deploy's precompile builds on it."""
    from wasmtime import Config

    config = Config()
    config.wasm_component_model = True
    config.epoch_interruption = True
    if tier == FAST:
        from wasmtime import _ffi

        _ffi.wasmtime_config_strategy_set(config.ptr(), _WINCH)
    return config
