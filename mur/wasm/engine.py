"""One wasmtime Engine per process, and a compile cache so a second launch does not recompile.

Compiling an 18 MB componentize-py component takes seconds; loading a serialized one is an mmap.
``Config.cache`` (wasmtime's own cache) lives in a directory we do not control and cannot be
pointed at a fresh location per run, so mur keeps its own: ``<cache>/wasm/<sha256 of the wasm>.
<engine fingerprint>.cwasm``, written atomically. The fingerprint covers the wasmtime version, the
engine settings and the platform, because serialized code only loads into an identical engine.

Deserializing is loading native code, so the cache directory must be ours: it is created 0700, and
one that is not owned by us or is group/other-writable is not used (we compile instead).

A compile runs on a worker thread while the calling thread waits: wasmtime cannot stop a compile,
but the wait ends at Ctrl-C (KeyboardInterrupt), the abandoned compile dies with the process, and
nothing reaches the cache, which is written only by the waiting thread once the compile is done.
mur.wasm.compile owns those threads and the cache writes; its ensure_compiled fills the cache ahead
of a run (build, install, publish; several components at once).
``WasmEngine.progress`` (set by ``mur run`` to its reporter) hears each compile as it starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import threading
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, ContextManager

from mur.fsutil import file_sha256, mark_used  # noqa: F401 - file_sha256 is re-exported (wasm.build, tests)
from mur.paths import cache_root
from mur.wasm.compile import compiling, run_interruptibly, store  # noqa: F401 - compiling: mur.cli.run
from mur.wasm.limits import EpochTicker, GuestError

ENGINE_SETTINGS = "component-model,epoch-interruption"


def wasmtime_version() -> str:
    """The installed wasmtime-py version (also the embedded wasmtime's major version)."""
    try:
        return metadata.version("wasmtime")
    except metadata.PackageNotFoundError:  # pragma: no cover - wasmtime is a hard dependency
        return "unknown"


def default_cache_dir() -> Path:
    return cache_root() / "wasm"


def engine_fingerprint() -> str:
    text = f"wasmtime {wasmtime_version()}; {ENGINE_SETTINGS}; {platform.machine()}; {sys.platform}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _private_dir(path: Path) -> bool:
    """Create `path` 0700 if missing; True when it is ours and not writable by others."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not (st.st_mode & 0o022)


def engine_config() -> Any:
    """A wasmtime Config with the runtime's settings (ENGINE_SETTINGS); deploy's precompile builds on it."""
    from wasmtime import Config

    config = Config()
    config.wasm_component_model = True
    config.epoch_interruption = True
    return config


class WasmEngine:
    """The process's wasmtime Engine plus its component compile cache and epoch ticker."""

    def __init__(self, cache_dir: Path | None = None):
        from wasmtime import Engine

        self.engine = Engine(engine_config())
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
        self._components: dict[str, Any] = {}
        self._digests: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()
        self._ticker: EpochTicker | None = None
        # `progress(what)` wraps each real compile (not a cache hit): e.g. "tool 'greet'".
        self.progress: Callable[[str], ContextManager[None]] | None = None

    def start_ticker(self) -> None:
        """Start the epoch ticker (idempotent). Deadlines fire only while it runs."""
        with self._lock:
            if self._ticker is None:
                self._ticker = EpochTicker(self.engine)

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        self._components.clear()

    def _digest(self, path: Path) -> str:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        digest = self._digests.get(key)
        if digest is None:
            digest = file_sha256(path)
            self._digests[key] = digest
        return digest

    def cache_path(self, digest: str) -> Path:
        return self.cache_dir / f"{digest}.{engine_fingerprint()}.cwasm"

    def component(self, path: Path, *, kind: str = "tool", label: str = "") -> Any:
        """The compiled Component for a .wasm file: from memory, the disk cache, or a compile."""
        from wasmtime import WasmtimeError
        from wasmtime.component import Component

        path = Path(path)
        digest = self._digest(path)
        with self._lock:
            hit = self._components.get(digest)
        if hit is not None:
            self.stats["memory_hits"] += 1
            return hit
        cached = self.cache_path(digest)
        usable = _private_dir(self.cache_dir)
        component = None
        if usable and cached.is_file():
            try:
                component = Component.deserialize_file(self.engine, str(cached))
                self.stats["disk_hits"] += 1
                mark_used(cached)
            except WasmtimeError:
                cached.unlink(missing_ok=True)  # stale or corrupt: recompile below
        if component is None:
            who = _who(path, kind, label)
            try:
                with self.progress(who) if self.progress is not None else contextlib.nullcontext():
                    component = self._compile(path)
            except WasmtimeError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid component"
                raise GuestError("E-RUN-001", f"{who}: failed to compile {path}: {first}",
                                 kind="compile") from exc
            self.stats["compiled"] += 1
            if usable:
                self._store(cached, component)
        with self._lock:
            self._components[digest] = component
        return component

    def prepare(self, wanted: list[tuple[Path, str, str]]) -> None:
        """Load every (path, kind, label) before the first call, compiling the missing ones in
        parallel (mur.wasm.compile) under one `progress` line; a failure is raised by the load."""
        from mur.wasm.compile import Source, ensure_compiled

        who = [_who(Path(p), kind, label) for p, kind, label in wanted]
        done = ensure_compiled([Source(w, path=Path(p)) for w, (p, _, _) in zip(who, wanted)], engine=self,
                               reporter=_ProgressSteps(self.progress))
        self.stats["compiled"] += len({d.sha256 for d in done if d.status == "compiled"})
        for path, kind, label in wanted:
            self.component(Path(path), kind=kind, label=label)

    def _compile(self, path: Path) -> Any:
        """Component.from_file on a compile thread; the wait is interruptible (see the module docstring)."""
        from wasmtime.component import Component

        return run_interruptibly(lambda: Component.from_file(self.engine, str(path)))

    def _store(self, target: Path, component: Any) -> None:
        store(target, bytes(component.serialize()))


def _who(path: Path, kind: str, label: str) -> str:
    return "capsule" if kind == "capsule" else f"{kind} '{label or path.stem}'"


class _ProgressSteps:
    """WasmEngine.progress as a mur.progress.Reporter: its step is the progress context (whose
    caller adds the verb, e.g. mur run's "compiling ..."), notes are dropped."""

    def __init__(self, progress: Callable[[str], ContextManager[None]] | None):
        self._progress = progress

    def note(self, text: str) -> None:
        pass

    def step(self, text: str) -> ContextManager[None]:
        if self._progress is None:
            return contextlib.nullcontext()
        return self._progress(text.removeprefix("compiling "))


_default: WasmEngine | None = None
_default_lock = threading.Lock()


def default_engine() -> WasmEngine:
    """The process-wide engine (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = WasmEngine()
        return _default
