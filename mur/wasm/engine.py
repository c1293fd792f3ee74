"""The wasmtime Engine of a process, and a compile cache so a second launch does not recompile.

Compiling an 18 MB componentize-py component takes seconds; loading a serialized one is an mmap.
``Config.cache`` (wasmtime's own cache) lives in a directory we do not control and cannot be
pointed at a fresh location per run, so mur keeps its own: ``<cache>/wasm/<sha256 of the wasm>.
<engine fingerprint>.cwasm``, written atomically. The fingerprint covers the wasmtime version, the
engine settings and the platform, because serialized code only loads into an identical engine.

Deserializing is loading native code, so the cache directory must be ours: it is created 0700, and
one that is not owned by us or is group/other-writable is not used (we compile instead). What is
compiled is what was hashed (mur.wasm.sources): a kept source in that directory, or the bytes of a
file read once.

Tiers. Each component is cached under two engine settings: ``optimized`` (Cranelift, what `mur
build`, `install` and deploy compile, keyed as always) and ``fast`` (Winch, a baseline compiler:
about a quarter of the compile time, slower code). A session's components share one engine, so
`prepare` picks the tier for all of them: optimized when every one of them has its optimized entry
(or nothing big is missing), else fast, compiling only what the fast tier lacks, and handing the
missing optimized entries to a background compile (mur.wasm.tierup) that the next launch loads.
MUR_WASM_TIERING=off always compiles optimized (the behaviour before tiers).

A compile runs on a worker thread while the calling thread waits: wasmtime cannot stop a compile,
but the wait ends at Ctrl-C (KeyboardInterrupt), the abandoned compile dies with the process, and
nothing reaches the cache, which is written only by the waiting thread once the compile is done.
mur.wasm.compile owns those threads and the cache writes; its ensure_compiled fills the cache ahead
of a run (build, install, publish; several components at once).
``WasmEngine.progress`` (set by ``mur run`` to its reporter) hears each compile as it starts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

from mur.fsutil import file_sha256, mark_used  # noqa: F401 - file_sha256 is re-exported (wasm.build, tests)
from mur.wasm import sources
from mur.wasm.cachekey import (  # noqa: F401 - re-exported: what names an entry (gc, deploy's precompile, tests)
    ENGINE_SETTINGS, FAST, OPTIMIZED, TIERS, default_cache_dir, engine_config, engine_fingerprint, entry_path,
    fingerprints,
)
from mur.wasm.compile import (  # noqa: F401 - compiling: mur.cli.run
    compiling, give_back_memory, private_cache_dir, run_interruptibly, store,
)
from mur.wasm.limits import EpochTicker, GuestError

# A component smaller than this compiles optimized at once (well under a second): no tiering.
TIER_MIN_BYTES = 1 << 20
TIERING_ENV = "MUR_WASM_TIERING"


def tiering_enabled() -> bool:
    return os.environ.get(TIERING_ENV, "on").strip().lower() not in ("off", "0", "false", "no")


@functools.lru_cache(maxsize=None)
def fast_tier_available() -> bool:
    """This wasmtime was built with Winch for this CPU (an engine with it can be made)."""
    from wasmtime import Engine

    try:
        Engine(engine_config(FAST))
        return True
    except Exception:  # noqa: BLE001 - any refusal means: no fast tier here
        return False


@dataclass
class Wanted:
    """One component `prepare` loads: where it is, its digest, and what it is compiled from."""

    path: Path
    who: str
    digest: str = ""
    source: Path | None = None  # a kept source (or, with an unusable cache, the file itself)
    data: bytes | None = None  # the bytes read and hashed, when they were
    size: int = 0


class WasmEngine:
    """The process's wasmtime Engine plus its component compile cache and epoch ticker."""

    def __init__(self, cache_dir: Path | None = None, tier: str | None = None):
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        # None: `prepare` chooses (optimized unless it has to compile something big); the wasmtime
        # Engine is made on first use, with the tier chosen by then.
        self.tier = tier
        self._engine: Any = None
        self.stats = {"compiled": 0, "disk_hits": 0, "memory_hits": 0}
        self.tier_up: list[str] = []  # digests handed to the background optimizing compile
        self._components: dict[str, Any] = {}
        self._held: dict[str, Any] = {}  # digest -> Component the capsule host deserialized before forking us
        self._digests: dict[tuple, str] = {}
        self._lock = threading.Lock()
        self._ticker: EpochTicker | None = None
        # `progress(what)` wraps each real compile (not a cache hit): e.g. "tool 'greet'".
        self.progress: Callable[[str], ContextManager[None]] | None = None

    @property
    def engine(self) -> Any:
        """The wasmtime Engine (made now if nothing needed it before: the tier is fixed from here);
        in a capsule forked by the capsule host, the host's optimized engine and what it holds."""
        with self._lock:
            if self._engine is None:
                self.tier = self.tier or OPTIMIZED
                held = _HELD.get(str(self.cache_dir)) if self.tier == OPTIMIZED else None
                if held is not None:
                    self._engine, self._held = held
                else:
                    from wasmtime import Engine

                    self._engine = Engine(engine_config(self.tier))
            return self._engine

    def start_ticker(self) -> None:
        """Start the epoch ticker (idempotent). Deadlines fire only while it runs."""
        engine = self.engine
        with self._lock:
            if self._ticker is None:
                self._ticker = EpochTicker(engine)

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        self._components.clear()

    def cache_path(self, digest: str, tier: str | None = None) -> Path:
        return entry_path(self.cache_dir, digest, tier or self.tier or OPTIMIZED)

    # --- what a path holds -------------------------------------------------------------------

    def _identify(self, path: Path, usable: bool) -> Wanted:
        """The digest of the component at `path`; a file outside the cache may be read (and then
        its bytes are kept on the result, so a compile uses exactly what was hashed)."""
        kept = sources.kept_digest(self.cache_dir, path) if usable else None
        if kept is not None:
            return Wanted(path, "", kept, source=path, size=_size(path))
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        digest = self._digests.get(key)
        if digest is None and usable:
            digest = sources.remembered(path, st)
        if digest is not None:
            self._digests[key] = digest
            return Wanted(path, "", digest, size=st.st_size)
        data, digest, read_st = sources.read_hashed(path)
        self._digests[key] = digest
        if usable:
            sources.remember(path, read_st, digest)
        return Wanted(path, "", digest, data=data, size=len(data))

    def _bytes(self, item: Wanted) -> Wanted:
        """`item` with what to compile from: its kept source, or the file's bytes read (and hashed) now."""
        if item.source is not None or item.data is not None:
            return item
        data, digest, _ = sources.read_hashed(item.path)
        item.data, item.digest, item.size = data, digest, len(data)
        return item

    # --- loading -----------------------------------------------------------------------------

    def component(self, path: Path, *, kind: str = "tool", label: str = "") -> Any:
        """The compiled Component for a .wasm file: from memory, the disk cache, or a compile."""
        from wasmtime import WasmtimeError

        path = Path(path)
        usable = private_cache_dir(self.cache_dir)
        item = self._identify(path, usable)
        item.who = _who(path, kind, label)
        with self._lock:
            hit = self._components.get(item.digest)
        if hit is not None:
            self.stats["memory_hits"] += 1
            return hit
        engine = self.engine
        component = self._load_cached(item.digest) if usable else None
        if component is None:
            item = self._bytes(item)
            try:
                with self.progress(item.who) if self.progress is not None else contextlib.nullcontext():
                    component = run_interruptibly(lambda: _compile(engine, item))
            except WasmtimeError as exc:
                raise _compile_error(item, exc) from exc
            self.stats["compiled"] += 1
            if usable:
                store(self.cache_path(item.digest), bytes(component.serialize()))
            give_back_memory()
        with self._lock:
            self._components[item.digest] = component
        return component

    def let_go(self) -> int:
        """Drop the components this engine deserialized that its cache can give again, and return
        the memory they held: what an idle capsule need not keep (mur.a2a.lifecycle calls it after
        a while without a task; the next task maps them from the cache again, a few ms each).
        A component the cache does not hold (not ours to write, or the write failed) is kept: it
        would be a compile. Returns how many were dropped."""
        if not private_cache_dir(self.cache_dir):
            return 0
        with self._lock:
            gone = [d for d in self._components if d not in self._held and self.cache_path(d).is_file()]
            for digest in gone:
                del self._components[digest]
        if gone:
            give_back_memory()
        return len(gone)

    def _load_cached(self, digest: str) -> Any:
        """The component from this tier's cache entry, or None (absent; a corrupt one is removed)."""
        from wasmtime import WasmtimeError
        from wasmtime.component import Component

        cached = self.cache_path(digest)
        held = self._held.get(digest)
        if held is not None and cached.is_file():
            self.stats["disk_hits"] += 1
            mark_used(cached)
            return held
        if not cached.is_file():
            return None
        try:
            component = Component.deserialize_file(self.engine, str(cached))
        except WasmtimeError:
            cached.unlink(missing_ok=True)  # stale or corrupt: recompiled
            return None
        self.stats["disk_hits"] += 1
        mark_used(cached)
        return component

    def prepare(self, wanted: list[tuple[Path, str, str]]) -> None:
        """Make sure every (path, kind, label) is compiled before the first call, in the tier chosen
        here (see the module docstring): the missing ones are compiled now, in parallel
        (mur.wasm.compile) under one `progress` line, and a failure is raised here. What the cache
        holds is loaded at its first use (an mmap, milliseconds): an idle capsule maps no component
        and imports no wasmtime until its first task; that holds after a compile too (what was
        compiled is written, dropped and mapped at first use), and once the sources read for it are
        dropped as well, the freed heap goes back to the kernel."""
        if self._prepare(wanted):
            give_back_memory()

    def _prepare(self, wanted: list[tuple[Path, str, str]]) -> bool:
        from mur.wasm.compile import compile_parallel

        usable = private_cache_dir(self.cache_dir)
        items = []
        for path, kind, label in wanted:
            item = self._identify(Path(path), usable)
            item.who = _who(Path(path), kind, label)
            items.append(item)
        with self._lock:
            todo = [i for i in items if i.digest not in self._components]
        if not todo:
            self.stats["memory_hits"] += len(items)
            return False
        if self._engine is None and self.tier is None:
            self.tier = self._choose_tier(todo, usable)
        missing: dict[str, Wanted] = {}
        for item in todo:
            if item.digest in missing or item.digest in self._components:
                continue
            if not (usable and self.cache_path(item.digest).is_file()):
                missing[item.digest] = self._bytes(item)
        if missing:
            engine = self.engine
            for item, outcome in compile_parallel(engine, list(missing.values()), self.progress):
                if isinstance(outcome, BaseException):
                    raise _compile_error(item, outcome) from outcome
                self.stats["compiled"] += 1
                component, blob = outcome
                if not usable or store(self.cache_path(item.digest), blob):
                    with self._lock:  # no entry to map it from: kept as compiled
                        self._components[item.digest] = component
                # else mapped from its entry at its first use, as a warm run's: an idle capsule that
                # compiled holds no compiled code, and the compile's memory goes back (prepare)
                del outcome, component, blob
        if self.tier == FAST and usable:
            self._schedule_tier_up(todo)
        return bool(missing)

    def _choose_tier(self, todo: list[Wanted], usable: bool) -> str:
        """Optimized when nothing big lacks its optimized entry; else fast (see the module docstring)."""
        if not usable or not tiering_enabled():
            return OPTIMIZED
        lacking = [i for i in todo if not self.cache_path(i.digest, OPTIMIZED).is_file()]
        if not any(i.size >= TIER_MIN_BYTES for i in lacking):
            return OPTIMIZED
        return FAST if fast_tier_available() else OPTIMIZED

    def _schedule_tier_up(self, items: list[Wanted]) -> None:
        """Hand the components that lack an optimized entry to a background compile (their kept
        sources are written first: that process compiles only what this one hashed)."""
        from mur.wasm import tierup

        digests = []
        for item in items:
            if item.digest in digests or self.cache_path(item.digest, OPTIMIZED).is_file():
                continue
            try:
                if item.source is None or sources.kept_digest(self.cache_dir, item.source) is None:
                    self._bytes(item)
                    sources.keep(self.cache_dir, item.data, item.digest)
            except OSError:
                continue
            digests.append(item.digest)
        if digests and tierup.start(self.cache_dir, digests):
            self.tier_up.extend(digests)



def _compile(engine: Any, item: Wanted) -> Any:
    from wasmtime.component import Component

    if item.data is not None:
        return Component(engine, item.data)
    return Component.from_file(engine, str(item.source))


def _compile_error(item: Wanted, exc: BaseException) -> BaseException:
    from wasmtime import WasmtimeError

    if not isinstance(exc, WasmtimeError):
        return exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid component"
    return GuestError("E-RUN-001", f"{item.who}: failed to compile {item.path}: {first}", kind="compile")


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _who(path: Path, kind: str, label: str) -> str:
    return "capsule" if kind == "capsule" else f"{kind} '{label or path.stem}'"


_default: WasmEngine | None = None
_default_lock = threading.Lock()

# --- held for forked capsules ---------------------------------------------------------------------
# The capsule host (mur.cli.capsulehost) deserializes the optimized cache entries used last, into one
# engine per cache directory, before it forks capsules: a capsule whose tier is optimized then takes
# that engine, and each component it finds here costs nothing to load (copy-on-write, the code
# pages shared). The host never compiles (a compile's thread pool would not survive the fork);
# capsules compile on the same engine as ever. Keyed by the cache directory: a capsule with
# another MUR_CACHE_DIR or HOME makes its own engine.
_HELD: dict[str, tuple[Any, dict[str, Any]]] = {}
HOLD_MAX = 8  # entries held per cache directory
HOLD_RECENT = 24 * 3600.0  # only entries used within this many seconds


def hold_recent(cache_dir: Path | None = None, limit: int = HOLD_MAX) -> int:
    """Deserialize the optimized entries of `cache_dir` used most recently (up to `limit` held in
    all) into the held engine; returns how many were added. Best effort: never raises."""
    import time

    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if not cache_dir.is_dir() or not private_cache_dir(cache_dir):  # none yet: nothing to hold, nothing made
        return 0
    suffix = f".{engine_fingerprint(OPTIMIZED)}.cwasm"
    now, found = time.time(), []
    try:
        with os.scandir(cache_dir) as entries:
            for entry in entries:
                if entry.name.endswith(suffix) and not entry.name.startswith("."):
                    st = entry.stat(follow_symlinks=False)
                    if entry.is_file(follow_symlinks=False) and now - st.st_mtime < HOLD_RECENT:
                        found.append((st.st_mtime, entry.name[: -len(suffix)], entry.path))
    except OSError:
        return 0
    try:
        from wasmtime import Engine, WasmtimeError
        from wasmtime.component import Component

        engine, held = _HELD.get(str(cache_dir)) or (Engine(engine_config(OPTIMIZED)), {})
        _HELD[str(cache_dir)] = (engine, held)
    except Exception:  # noqa: BLE001 - no wasmtime here: nothing held
        return 0
    added = 0
    for _mtime, digest, path in sorted(found, reverse=True):
        if len(held) >= limit:
            break
        if digest in held:
            continue
        try:
            held[digest] = Component.deserialize_file(engine, path)
            added += 1
        except (WasmtimeError, OSError):
            continue
    return added


def let_go_except(cache_dirs: list[str]) -> None:
    """Drop what is held for any cache directory but `cache_dirs` (capsules forked later no longer use it)."""
    for key in [k for k in _HELD if k not in cache_dirs]:
        del _HELD[key]


def default_engine() -> WasmEngine:
    """The process-wide engine (created on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = WasmEngine()
        return _default
