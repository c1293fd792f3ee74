"""`mur gc`: find old session directories and unused compiled components, then (with --yes) remove them.

Plan as data, then apply: `plan_gc` returns the items it would remove (kind, path, size, age, why),
touching nothing; `apply_gc` removes exactly those. What counts:

  session   a `ses_*` directory of a capsule's workdir (`<manifest dir>/workdir`, or `--workdir DIR`
            and its `.murmur/`) whose trace was last written more than --older-than ago, and that no
            process has open (a file or a working directory inside it: a sleeping A2A capsule writes
            nothing for days but keeps its trace open)
  compiled  `<cache>/wasm/*.cwasm`: built for another wasmtime or engine setting (never loadable
            again), or not loaded for --older-than (the engine sets the mtime on each use); and
            `<cache>/wasm/<sha256>.wasm`, a kept source (mur.wasm.sources) not used for --older-than
  built     `<cache>/components/<key>/`: a componentize-py output not reused for --older-than

Only names mur itself makes are considered, symlinks are never followed or removed through, and a
cache directory that is not ours is left alone (the engine refuses to load from one anyway).
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from mur import fswalk
from mur.digits import is_digits
from mur.errors import MurError
from mur.fsafe import Tree

SESSION_DIR = re.compile(r"ses_[0-9a-f]{32}")
BUILD_KEY = re.compile(r"[0-9a-f]{32}")
COMPILED = re.compile(r"(?P<digest>[0-9a-f]{64})\.(?P<fingerprint>[0-9a-f]{16})\.cwasm")
KEPT_SOURCE = re.compile(r"[0-9a-f]{64}\.wasm")
TEMP = re.compile(r"\..+\.tmp")
TEMP_GRACE_SECONDS = 3600  # a temp file this old is a crashed writer's, not one being written
SIZE_SECONDS = 30.0  # a size is for the listing: a tree too big to measure in time shows what was counted
KINDS = ("session", "compiled", "built")


@dataclass(frozen=True)
class Item:
    """One thing `mur gc` removes."""

    kind: str
    path: Path
    bytes: int
    age_seconds: int
    reason: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "path": str(self.path), "bytes": self.bytes, "age_seconds": self.age_seconds,
                "reason": self.reason}


@dataclass
class GcPlan:
    items: list[Item] = field(default_factory=list)
    in_use: list[Path] = field(default_factory=list)  # old sessions kept because a process has them open

    @property
    def total_bytes(self) -> int:
        return sum(i.bytes for i in self.items)


def tree_size(path: Path) -> int:
    """Bytes of the regular files under `path` (or of `path` itself), symlinks not followed. A
    session's work/ is a tree its tools made: walked iteratively at any depth (mur.fswalk), within a
    deadline (past it, what was counted)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0
    total = 0
    try:
        for step in fswalk.walk(fd, deadline=time.monotonic() + SIZE_SECONDS):
            if step.kind == "file" and stat.S_ISREG(step.st.st_mode):
                total += step.st.st_size
    except (OSError, fswalk.WalkTimeout):
        pass
    finally:
        os.close(fd)
    return total


def _mtime(path: Path) -> float | None:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return None


def _real_dirs(parent: Path, pattern: re.Pattern) -> list[Path]:
    """Children of `parent` named by `pattern` that are real directories (not symlinks)."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    return sorted(Path(e.path) for e in entries if pattern.fullmatch(e.name) and e.is_dir(follow_symlinks=False))


def open_paths(proc: Path = Path("/proc")) -> set[str]:
    """Every path some process has open or as its working directory (those we may read)."""
    found: set[str] = set()
    for pid in (p for p in _listdir(proc) if is_digits(p)):
        base = proc / pid
        for link in [base / "cwd", *((base / "fd" / fd) for fd in _listdir(base / "fd"))]:
            try:
                found.add(os.readlink(link))
            except OSError:
                continue
    return found


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _used_by_a_process(directory: Path, opened: set[str]) -> bool:
    real = os.path.realpath(directory)
    return any(p == real or p.startswith(real + os.sep) for p in opened)


def session_items(roots: Iterable[Path], older_than: int, now: float, opened: set[str], plan: GcPlan) -> None:
    """Add the sessions under `roots` (and each root's .murmur/) last written before the cutoff."""
    for root in roots:
        for directory in _real_dirs(root, SESSION_DIR) + _real_dirs(root / ".murmur", SESSION_DIR):
            last = _mtime(directory / "trace.jsonl") or _mtime(directory)
            if last is None or now - last < older_than:
                continue
            if _used_by_a_process(directory, opened):
                plan.in_use.append(directory)
                continue
            plan.items.append(Item("session", directory, tree_size(directory), int(now - last),
                                   f"last written {_ago(now - last)} ago"))


def cache_items(cache: Path, fingerprint: str | Iterable[str], older_than: int, now: float, plan: GcPlan) -> None:
    """Add compiled components and guest builds that are stale or unused for `older_than` seconds
    (`fingerprint`: the engine's, or each of its tiers')."""
    current = {fingerprint} if isinstance(fingerprint, str) else set(fingerprint)
    wasm = cache / "wasm"
    for name in sorted(_listdir(wasm)):
        path = wasm / name
        last = _mtime(path)
        if last is None or path.is_symlink():
            continue
        match = COMPILED.fullmatch(name)
        if match and match["fingerprint"] not in current:
            reason = "compiled for another wasmtime or engine setting"
        elif match and now - last >= older_than:
            reason = f"not loaded for {_ago(now - last)}"
        elif KEPT_SOURCE.fullmatch(name) and now - last >= older_than:
            reason = f"source not used for {_ago(now - last)}"
        elif TEMP.fullmatch(name) and now - last >= TEMP_GRACE_SECONDS:
            reason = "left behind by an interrupted write"
        else:
            continue
        plan.items.append(Item("compiled", path, tree_size(path), int(now - last), reason))
    for directory in _real_dirs(cache / "components", BUILD_KEY):
        outputs = [directory / n for n in _listdir(directory) if n.endswith(".wasm")]
        last = max(filter(None, (_mtime(p) for p in outputs)), default=_mtime(directory))
        if last is not None and now - last >= older_than:
            plan.items.append(Item("built", directory, tree_size(directory), int(now - last),
                                   f"not reused for {_ago(now - last)}"))


def plan_gc(session_roots: Iterable[Path], cache: Path, *, older_than: int, fingerprint: str | Iterable[str],
            now: float | None = None, opened: set[str] | None = None) -> GcPlan:
    """What `mur gc` would remove (nothing is touched)."""
    now = time.time() if now is None else now
    plan = GcPlan()
    session_items(session_roots, older_than, now, open_paths() if opened is None else opened, plan)
    cache_items(cache, fingerprint, older_than, now, plan)
    return plan


def apply_gc(plan: GcPlan) -> list[Item]:
    """Remove the plan's items; returns those removed. E-IO-002/003 on the first one that cannot be."""
    removed = []
    for item in plan.items:
        try:
            with Tree(item.path.parent) as parent:  # iterative, never through a link (a tool's tree)
                parent.remove_tree(item.path.name)
        except FileNotFoundError:
            pass  # gone already (another gc, or the cache's own cleanup)
        except PermissionError as exc:
            raise MurError("E-IO-002", f"permission denied removing {item.path}: {exc.strerror}",
                           f"{len(removed)} of {len(plan.items)} items were removed before it") from exc
        except (OSError, fswalk.WalkTimeout) as exc:
            raise MurError("E-IO-003", f"cannot remove {item.path}: {getattr(exc, 'strerror', None) or exc}",
                           f"{len(removed)} of {len(plan.items)} items were removed before it") from exc
        removed.append(item)
    return removed


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
