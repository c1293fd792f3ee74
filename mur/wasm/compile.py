"""Ensure components are compiled into the engine's cache, several at once: the one writer of .cwasm entries.

Why: compiling an 18 MB componentize-py component takes 10-20 s, and `mur run` loads components
from the cache by the sha256 of their bytes (mur.wasm.engine). So `mur build`, `mur install` and
`mur publish` compile what they put where `mur run` will load it, and a first run starts warm.

How:
- A source is a file or bytes (an archive entry); its cache entry is
  ``<cache>/<sha256>.<engine fingerprint>.cwasm``. An entry that loads is "cached"; one that does not
  (corrupt, truncated, stale) is removed and compiled again.
- Compiles run on daemon threads, up to one per core: wasmtime's compile runs in native code with
  the GIL released (ctypes), so two threads compile two components in about the time of one.
  A thread only compiles and serializes; the waiting (calling) thread writes each entry, through
  mur.fsutil.atomic_write_bytes (an O_EXCL temp file renamed over the name), so a reader never sees
  half an entry and two processes compiling the same digest both write whole files.
- Ctrl-C: the wait is interruptible (KeyboardInterrupt in the calling thread); wasmtime cannot stop a
  compile, so the abandoned threads die with the process, and since they never write, no temp file
  and no entry is left. A Ctrl-C during a write removes that write's temp file.
- Progress goes to an injected mur.progress.Reporter: one step for the batch, a note per component.
- Bytes that are not a component (a core module, a placeholder) are "skipped": `mur run` reports
  them when it loads them. A component that fails to compile is "failed" here, never an error: the
  command that called this (build, install) still did its job, and `mur run` reports the failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from mur.fsutil import atomic_write_bytes, file_sha256, mark_used
from mur.progress import QUIET, Reporter

# The preamble of a component binary: magic, version 0x0d, layer 1 (a core module has layer 0).
COMPONENT_PREAMBLE = b"\0asm\x0d\x00\x01\x00"


@dataclass(frozen=True)
class Source:
    """A component to compile: `label` is what the user reads ("tool 'greet'"), from `path` or `data`."""

    label: str
    path: Path | None = None
    data: bytes | None = None

    def read(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        return Path(self.path).read_bytes()

    def head(self) -> bytes:
        if self.data is not None:
            return self.data[: len(COMPONENT_PREAMBLE)]
        assert self.path is not None
        with open(self.path, "rb") as fh:
            return fh.read(len(COMPONENT_PREAMBLE))

    def sha256(self) -> str:
        if self.data is not None:
            return hashlib.sha256(self.data).hexdigest()
        assert self.path is not None
        return file_sha256(self.path)


@dataclass(frozen=True)
class Compiled:
    """What ensure_compiled did with one source: status is compiled, cached, skipped or failed."""

    label: str
    sha256: str
    status: str
    cache_file: Path | None = None
    seconds: float = 0.0
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "sha256": self.sha256, "status": self.status,
                "cache_file": str(self.cache_file) if self.cache_file else None,
                "seconds": round(self.seconds, 2), "detail": self.detail or None}


def private_cache_dir(path: Path) -> bool:
    """Create `path` 0700 if missing; True when it is ours and not writable by others (only then is
    a compiled entry in it trusted, or written)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError:
        return False
    return st.st_uid == os.geteuid() and not (st.st_mode & 0o022)


def ensure_compiled(sources: Sequence[Source], *, engine: Any, reporter: Reporter = QUIET,
                    jobs: int | None = None) -> list[Compiled]:
    """Every source's entry in `engine`'s cache (a mur.wasm.engine.WasmEngine, or anything with its
    `engine`, `cache_dir` and `cache_path`), compiling the missing ones in parallel; one Compiled per
    source, in order (a digest seen twice is compiled once)."""
    results: dict[int, Compiled] = {}
    todo: dict[str, tuple[Source, Path]] = {}  # digest -> (first source, cache file)
    waiting: dict[str, list[int]] = {}  # digest -> indexes of the sources that share it
    usable = private_cache_dir(engine.cache_dir)
    for i, src in enumerate(sources):
        try:
            is_component = src.head() == COMPONENT_PREAMBLE
            digest = src.sha256() if is_component else ""
        except OSError as exc:
            results[i] = Compiled(src.label, "", "failed", detail=f"cannot read {src.path}: {exc.strerror or exc}")
            continue
        if not is_component:
            results[i] = Compiled(src.label, "", "skipped", detail="not a WebAssembly component")
            continue
        target = engine.cache_path(digest)
        if not usable:
            results[i] = Compiled(src.label, digest, "skipped",
                                  detail=f"cache directory {engine.cache_dir} is not private to this user")
        elif digest in todo:
            waiting[digest].append(i)
        elif loads(engine, target):
            mark_used(target)
            results[i] = Compiled(src.label, digest, "cached", target)
        else:
            todo[digest] = (src, target)
            waiting[digest] = [i]
    if todo:
        noun = "component" if len(todo) == 1 else "components"
        names = ", ".join(src.label for src, _ in todo.values())
        with reporter.step(f"compiling {len(todo)} {noun} ({names})"):
            for digest, done in _compile_all(engine, todo, jobs or os.cpu_count() or 1):
                if done.status == "compiled":
                    reporter.note(f"compiled {done.label} ({done.seconds:.1f}s)")
                else:
                    reporter.note(f"could not compile {done.label}: {done.detail}")
                for i in waiting[digest]:
                    results[i] = Compiled(sources[i].label, digest, done.status, done.cache_file, done.seconds,
                                          done.detail)
    return [results[i] for i in range(len(sources))]


def loads(engine: Any, target: Path) -> bool:
    """The cache entry exists and deserializes into `engine` (a corrupt one is removed)."""
    from wasmtime import WasmtimeError
    from wasmtime.component import Component

    if not target.is_file():
        return False
    try:
        Component.deserialize_file(engine.engine, str(target))
        return True
    except WasmtimeError:
        target.unlink(missing_ok=True)
        return False


def store(target: Path, blob: bytes) -> str:
    """Write a serialized component atomically; '' when written, else why not (a cache we cannot
    write is only slower, never wrong)."""
    from mur.errors import MurError

    try:
        atomic_write_bytes(target, blob, 0o600)
    except (OSError, MurError) as exc:  # MurError: a full disk, named by fsutil
        return str(getattr(exc, "message", None) or getattr(exc, "strerror", None) or exc)
    return ""


def _compile_all(engine: Any, todo: dict[str, tuple[Source, Path]], jobs: int) -> Iterator[tuple[str, Compiled]]:
    """Compile on up to `jobs` daemon threads; yield (digest, Compiled) as each finishes, after the
    calling thread wrote its entry."""
    from wasmtime.component import Component

    pending = list(todo.items())
    finished: queue.Queue = queue.Queue()

    def work(digest: str, src: Source) -> Any:
        if src.data is None:
            return Component.from_file(engine.engine, str(src.path)).serialize()
        return Component(engine.engine, src.data).serialize()

    def launch() -> None:
        digest, (src, _target) = pending.pop(0)
        start_thread(lambda: work(digest, src), lambda box: finished.put((digest, box)))

    running = 0
    started = {d: time.monotonic() for d in todo}
    while pending and running < max(1, jobs):
        launch()
        running += 1
    while running:
        digest, box = finished.get()  # interruptible: Ctrl-C lands here, and nothing is written
        running -= 1
        if pending:
            launch()
            running += 1
        src, target = todo[digest]
        seconds = time.monotonic() - started[digest]
        if "error" in box:
            exc = box["error"]
            if not isinstance(exc, Exception):
                raise exc
            text = str(exc).strip()
            yield digest, Compiled(src.label, digest, "failed", seconds=seconds,
                                   detail=text.splitlines()[0] if text else type(exc).__name__)
            continue
        why = store(target, bytes(box["value"]))
        yield digest, Compiled(src.label, digest, "compiled" if not why else "failed",
                               target if not why else None, seconds, f"cache not written: {why}" if why else "")


def compile_parallel(engine: Any, items: Sequence[Any], progress: Callable[[str], Any] | None = None,
                     jobs: int | None = None) -> Iterator[tuple[Any, Any]]:
    """Compile `items` (mur.wasm.engine.Wanted: bytes in `data` or a kept `source` file) into
    `engine`, up to one thread per core, under one `progress` line ("2 components (tool 'greet',
    capsule)"); yields (item, (component, serialized bytes)) or (item, the exception) as each ends.
    Writing the cache is the caller's (this thread's) job, as for ensure_compiled."""
    from wasmtime.component import Component

    def work(item: Any) -> tuple[Any, bytes]:
        if item.data is not None:
            component = Component(engine, item.data)
        else:
            component = Component.from_file(engine, str(item.source))
        return component, bytes(component.serialize())

    noun = "component" if len(items) == 1 else "components"
    label = f"{len(items)} {noun} ({', '.join(i.who for i in items)})"
    finished: queue.Queue = queue.Queue()
    pending = list(items)
    running = 0
    with progress(label) if progress is not None else contextlib.nullcontext():
        while pending and running < max(1, jobs or os.cpu_count() or 1):
            item = pending.pop(0)
            start_thread(lambda item=item: work(item), lambda box, item=item: finished.put((item, box)))
            running += 1
        while running:
            item, box = finished.get()  # interruptible: Ctrl-C lands here, and nothing is written
            running -= 1
            if pending:
                nxt = pending.pop(0)
                start_thread(lambda nxt=nxt: work(nxt), lambda box, nxt=nxt: finished.put((nxt, box)))
                running += 1
            if "error" in box and not isinstance(box["error"], Exception):
                raise box["error"]
            yield item, box["error"] if "error" in box else box["value"]


# --- compile threads (also mur.wasm.engine's) ------------------------------------------------

_compiling: set[threading.Thread] = set()


def start_thread(fn: Callable[[], Any], done: Callable[[dict[str, Any]], None]) -> threading.Thread:
    """Run `fn` on a daemon thread; `done({"value": v} or {"error": exc})` when it ends. Daemon:
    a compile abandoned at Ctrl-C must not hold the process's exit."""

    def run() -> None:
        box: dict[str, Any] = {}
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
        finally:
            _compiling.discard(worker)
        done(box)

    free_eagerly()
    worker = threading.Thread(target=run, name="mur-wasm-compile", daemon=True)
    _compiling.add(worker)
    worker.start()
    return worker


def run_interruptibly(fn: Callable[[], Any]) -> Any:
    """`fn()` on a compile thread while this thread waits (a Ctrl-C ends the wait, not the compile)."""
    finished: queue.Queue = queue.Queue()
    start_thread(fn, finished.put)
    box = finished.get()
    if "error" in box:
        raise box["error"]
    return box["value"]


# A compile's memory, given back. Cranelift and Winch allocate hundreds of MB on the compile
# threads (and wasmtime's own pool); freed, glibc kept it: the heap's top is trimmed only past a
# threshold that grows with every large free (to 64 MB), the threads' arenas are never shrunk by
# malloc_trim, and a service that compiled at its start stayed at ~550 MB RSS for its whole idle
# life. Measured with the two components of examples/hello compiled on a thread: 415 MB after the
# compile, 286 MB freed, 54-67 MB after malloc_trim, 16 MB with a fixed trim threshold as well (the
# compile no slower). Only glibc has these calls; elsewhere nothing is asked.
M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter (malloc.h)
TRIM_THRESHOLD = 128 << 10  # glibc's starting value, kept fixed: a free past it shrinks the heap at once
_trimming = False


def _glibc(name: str) -> Any:
    import ctypes

    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None


def free_eagerly() -> None:
    """From now on, memory freed at the top of any heap goes back to the kernel at once (once per process)."""
    global _trimming
    if _trimming:
        return
    _trimming = True
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


def give_back_memory() -> None:
    """Return what a finished compile freed inside the heaps to the kernel (glibc's malloc_trim)."""
    import ctypes

    trim = _glibc("malloc_trim")
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim(0)


def compiling() -> bool:
    """A compile is still running (one a Ctrl-C abandoned: it ends only with the process)."""
    return bool(_compiling)
