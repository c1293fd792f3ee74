"""The background half of tiered compilation: compile a session's components optimized, for the
next launch.

`mur run` starts on the fast tier when a big component has no optimized entry (mur.wasm.engine),
and hands those components' digests to `start`, which launches this module as its own process:
detached (its own session, no terminal, output dropped), at the lowest CPU priority (nice 19: it
takes little CPU from anything else), outliving the run that started it. It
compiles each digest's kept source (`<cache>/wasm/<sha256>.wasm`, written by the runtime that hashed
it; re-hashed here before compiling) into the optimized entry, through the same atomic cache
write as every compile. One process per digest at a time: a flock on `.tierup-<digest>.lock` in
the cache directory (a second `mur run` meanwhile finds it held and does not start another).

MUR_WASM_TIERING=off turns tiering (and so this) off.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from mur.fsutil import lock_held

LOCK_PREFIX = ".tierup-"


def command(cache_dir: Path, digests: list[str]) -> list[str]:
    """The command line that compiles `digests` in `cache_dir` (this interpreter, or the bundled runtime)."""
    if getattr(sys, "frozen", False):  # the PyInstaller runtime bundle: its executable is mur itself
        return [sys.executable, "__tier-up", str(cache_dir), *digests]
    return [sys.executable, "-m", "mur.wasm.tierup", str(cache_dir), *digests]


def _busy(cache_dir: Path, digest: str) -> bool:
    """Another tier-up holds this digest's lock right now."""
    return lock_held(cache_dir / f"{LOCK_PREFIX}{digest}.lock")


def start(cache_dir: Path, digests: list[str]) -> bool:
    """Launch the background compile of `digests` (those no other tier-up is compiling); True when one started."""
    todo = [d for d in digests if not _busy(cache_dir, d)]
    if not todo:
        return False
    env = {k: v for k, v in os.environ.items() if not k.startswith("MURMUR_")}
    try:
        subprocess.Popen(command(cache_dir, todo), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True, env=env,
                         cwd="/")
    except OSError:
        return False
    return True


def _lower_priority() -> None:
    """nice 19: about a seventieth of a CPU against busy work, all of an idle one. Not SCHED_IDLE,
    which on a machine that is never idle would never finish."""
    try:
        os.nice(19)
    except OSError:
        pass


def compile_one(cache_dir: Path, digest: str) -> str:
    """Compile one digest's kept source into its optimized entry: compiled, present, busy or why not."""
    from mur.wasm import sources
    from mur.wasm.cachekey import OPTIMIZED, engine_config, entry_path
    from mur.wasm.compile import private_cache_dir, store

    if not private_cache_dir(cache_dir):
        return "cache directory is not private"
    target = entry_path(cache_dir, digest, OPTIMIZED)
    if target.is_file():
        return "present"
    lock = cache_dir / f"{LOCK_PREFIX}{digest}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        return f"no lock: {exc}"
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return "busy"
        if target.is_file():
            return "present"
        source = sources.trusted_kept(cache_dir, digest)
        if source is None:
            return "no kept source"
        data = source.read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            return "kept source does not match its digest"
        from wasmtime import Engine
        from wasmtime.component import Component

        blob = bytes(Component(Engine(engine_config(OPTIMIZED)), data).serialize())
        why = store(target, blob)
        return why or "compiled"
    finally:
        try:
            os.unlink(lock)
        except OSError:
            pass
        os.close(fd)


def main(argv: list[str]) -> int:
    """`python -m mur.wasm.tierup CACHE_DIR DIGEST...`: compile each, at the lowest priority."""
    if len(argv) < 2:
        print("usage: python -m mur.wasm.tierup CACHE_DIR DIGEST...", file=sys.stderr)
        return 2
    _lower_priority()
    cache_dir = Path(argv[0])
    failed = 0
    for digest in argv[1:]:
        outcome = compile_one(cache_dir, digest)
        failed += outcome not in ("compiled", "present", "busy")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
