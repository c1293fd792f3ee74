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

import os
import platform as _platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mur.resolve.files import FileRef
from mur.errors import MurError
from mur.fsutil import file_sha256
from mur.paths import cache_root
from mur.progress import QUIET, Reporter

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


class _CrossEngine:
    """What mur.wasm.compile.ensure_compiled needs of an engine, for one target: a wasmtime Engine
    with the runtime's settings and the target's CPU baseline, and deploy's own cache of its code."""

    def __init__(self, plat: str, cache_dir: Path):
        from wasmtime import Engine

        from mur.wasm.engine import engine_fingerprint

        self.engine = Engine(_engine_config(plat))
        self.cache_dir = cache_dir
        self.fingerprint = engine_fingerprint()  # the runtime engine's: the name its cache looks for
        self.plat = plat

    def cache_path(self, digest: str) -> Path:
        return self.cache_dir / f"{digest}.{self.fingerprint}.{self.plat}.cwasm"


def precompile(sources: list[tuple[str, bytes]], plat: str, reporter: Reporter = QUIET) -> list[Precompiled]:
    """Cross-compiled, serialized components (cached here by wasm digest, engine and target),
    several at once, through the one compile path (mur.wasm.compile: parallel threads, atomic cache
    writes, Ctrl-C leaves nothing half-written)."""
    from mur.wasm.compile import Source, ensure_compiled

    cache = cache_root() / "deploy-precompiled"
    _make_private(cache)
    engine = _CrossEngine(plat, cache)
    out: list[Precompiled] = []
    seen: set[str] = set()
    for done in ensure_compiled([Source(label, data=data) for label, data in sources], engine=engine,
                                reporter=reporter):
        if done.status not in ("compiled", "cached") or done.cache_file is None:
            raise MurError("E-RUN-001", f"{done.label} failed to compile for {plat}: {done.detail or done.status}",
                           "fix the component (the target would fail the same way)")
        if done.sha256 in seen:
            continue
        seen.add(done.sha256)
        local = done.cache_file
        st = local.stat()
        out.append(Precompiled(done.label, done.sha256, FileRef(str(local), f"{done.sha256}.{engine.fingerprint}.cwasm",
                                                              file_sha256(local), st.st_size, 0o600)))
    _prune(cache, keep={Path(p.file.src).name for p in out})
    return out


def _make_private(cache: Path) -> None:
    """The cache holds native code the target will load: 0700 and ours (an older mur made it 0755)."""
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        if cache.stat().st_uid == os.geteuid():
            os.chmod(cache, 0o700)
    except OSError:
        pass  # ensure_compiled reports a cache it cannot use


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
