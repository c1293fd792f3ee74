"""Compile a capsule's WebAssembly components here, ship the compiled form with the release.

Why: the runtime compiles every component before it reports ready (mur.wasm.engine), and an
18 MB componentize-py component that compiles in ~15 s here takes many minutes on an emulated VM
(qemu TCG) or a small cloud instance. The engine already keeps a compile cache,
`~/.murmur/cache/wasm/<sha256 of the wasm>.<engine fingerprint>.cwasm`, and falls back to
compiling when a cached file does not load; deploy fills that cache on the target.

Serialized code is CPU-feature sensitive: code compiled for this machine's CPU (AVX-512 here)
would be rejected by a target without those features. So components are cross-compiled for a
portable baseline (x86-64-v2: SSE4.2 + POPCNT, which every x86-64 server of the last decade and
qemu's `-cpu max` have) by setting the engine's target explicitly; such code loads into a native
engine anywhere. The engine settings are the runtime's own (mur.wasm.engine.engine_config); the cache file name
carries the engine fingerprint, so a runtime with other settings simply compiles instead.
"""

from __future__ import annotations

import hashlib
import os
import platform as _platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from mur.resolve.files import FileRef
from mur.errors import MurError
from mur.fsutil import file_sha256, write_file
from mur.paths import cache_root

EXPECTED_SETTINGS = "component-model,epoch-interruption"
TARGETS = {
    "linux-x86_64": ("x86_64-unknown-linux-gnu", ("has_sse3", "has_ssse3", "has_sse41", "has_sse42", "has_popcnt")),
    "linux-aarch64": ("aarch64-unknown-linux-gnu", ()),
}


@dataclass(frozen=True)
class Precompiled:
    label: str
    wasm_sha256: str
    file: FileRef  # local .cwasm; rel = the file name the target's engine looks for


def _engine_config(plat: str) -> Any:
    from mur.wasm.engine import engine_config

    triple, flags = TARGETS[plat]
    cfg = engine_config()  # the runtime's own settings, so the cached code loads into its engine
    cfg.target = triple
    for flag in flags:
        cfg.cranelift_flag_enable(flag)
    return cfg


def supported(plat: str) -> str | None:
    """None when components can be precompiled for `plat` here, else why not."""
    try:
        from mur.wasm import engine as eng
    except ImportError:
        return "no WebAssembly engine in this mur"
    if getattr(eng, "ENGINE_SETTINGS", None) != EXPECTED_SETTINGS:
        return "the runtime's engine settings changed; the target compiles instead"
    here = {"amd64": "x86_64", "arm64": "aarch64"}.get(_platform.machine().lower(), _platform.machine().lower())
    if plat not in TARGETS or plat != f"linux-{here}":
        return f"no precompilation for {plat} on this machine"
    return None


def precompile(sources: list[tuple[str, bytes]], plat: str, note: Callable[[str], None] | None = None) -> list[Precompiled]:
    """Cross-compiled, serialized components (cached here by wasm digest, engine and target)."""
    from wasmtime import Engine
    from wasmtime.component import Component

    from mur.wasm.engine import engine_fingerprint

    fp = engine_fingerprint()
    cache = cache_root() / "deploy-precompiled"
    engine = None
    out: list[Precompiled] = []
    seen: set[str] = set()
    for label, data in sources:
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        local = cache / f"{digest}.{fp}.{plat}.cwasm"
        if not local.is_file():
            if note:
                note(f"precompile {label} for {plat}")
            if engine is None:
                engine = Engine(_engine_config(plat))
            try:
                blob = Component(engine, data).serialize()
            except Exception as exc:  # noqa: BLE001 - wasmtime.WasmtimeError and friends
                first = (str(exc).strip().splitlines() or ["invalid component"])[0]
                raise MurError("E-RUN-001", f"{label} failed to compile for {plat}: {first}",
                               "fix the component (the target would fail the same way)") from exc
            write_file(local, bytes(blob), 0o600)
        st = local.stat()
        out.append(Precompiled(label, digest, FileRef(str(local), f"{digest}.{fp}.cwasm", file_sha256(local), st.st_size,
                                                       0o600)))
    _prune(cache, keep={Path(p.file.src).name for p in out})
    return out


def _prune(cache: Path, keep: set[str], limit: int = 32) -> None:
    try:
        files = sorted((p for p in cache.iterdir() if p.suffix == ".cwasm"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for old in files[: max(0, len(files) - limit)]:
        if old.name not in keep:
            try:
                os.unlink(old)
            except OSError:
                pass
