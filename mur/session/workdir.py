"""Session workdir layout (reference/upstream.md 3.1).

  accessible workdir = --workdir DIR, else <manifest dir>/workdir/<session id>
  session workdir    = <accessible>/.murmur/<session id> with --workdir, else the accessible workdir

The accessible workdir is what guests and shell tools see (task.md / input.txt, .capsule-home/, shell
logs); the session workdir holds what the runtime writes (MURMUR.md, trace.jsonl, out/, logs/, tools/).
Without --workdir the two are one directory.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from mur.errors import MurError


@dataclass(frozen=True)
class Workdir:
    accessible: Path
    session: Path

    @property
    def out(self) -> Path:
        return self.session / "out"

    @property
    def logs(self) -> Path:
        return self.session / "logs"

    @property
    def tools(self) -> Path:
        return self.session / "tools"

    @property
    def trace(self) -> Path:
        return self.session / "trace.jsonl"

    @property
    def result(self) -> Path:
        return self.out / "result.txt"

    @property
    def bootstrap_log(self) -> Path:
        return self.logs / "bootstrap.log"


def plan_workdir(manifest_dir: Path, session_id: str, workdir: Path | None) -> Workdir:
    """Where this session's directories go (pure)."""
    if workdir is not None:
        accessible = workdir.resolve()
        return Workdir(accessible, accessible / ".murmur" / session_id)
    accessible = (manifest_dir / "workdir" / session_id).resolve()
    return Workdir(accessible, accessible)


def create_workdir(wd: Workdir) -> None:
    """Create the layout; E-IO-002/003 when the filesystem refuses."""
    try:
        for path in (wd.accessible, wd.session, wd.out, wd.logs, wd.tools):
            path.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise MurError("E-IO-002", f"failed to create workdir at {wd.session}: {exc.strerror}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to create workdir at {wd.session}: {exc.strerror or exc}") from exc


def write_task_input(wd: Workdir, task: str | None) -> str | None:
    """`--task`: an existing file is copied to task.md, anything else is the literal task text.

    Returns the task text from task.md / input.txt (first present), or None.
    """
    target = wd.accessible / "task.md"
    if task is not None:
        source = Path(task)
        try:
            if len(task) < 4096 and "\n" not in task and source.is_file():
                shutil.copyfile(source, target)
            else:
                target.write_text(task, encoding="utf-8")
        except OSError as exc:
            raise MurError("E-IO-003", f"failed to write {target}: {exc.strerror or exc}") from exc
    for name in ("task.md", "input.txt"):
        path = wd.accessible / name
        if path.is_file():
            try:
                return path.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                raise MurError("E-IO-003", f"failed to read {path}: {exc.strerror or exc}") from exc
    return None


def dir_size(path: Path) -> int:
    """Total bytes of regular files under `path` (symlinks not followed)."""
    total = 0
    for child in path.rglob("*"):
        try:
            if child.is_file() and not child.is_symlink():
                total += child.stat().st_size
        except OSError:
            continue
    return total
