"""Session directories: the runtime's record, and the workdir the tools live in, never one inside the other.

  session dir  S = <manifest dir>/workdir/<session id>
                   (with --workdir DIR when that is inside DIR, e.g. DIR = <manifest dir>/workdir:
                   ~/.murmur/sessions/<session id>)
               trace.jsonl, out/ (result.txt, result_<task>.txt, compaction summaries), contexts/,
               logs/ (bootstrap, tool-*, capsule, hook-*, otel, shell-*): written by the runtime only
  accessible   A = --workdir DIR, else S/work
               task.md / input.txt, MURMUR.md, tools/, .capsule-home/, and whatever the tools write:
               the guests' preopen and the shell tools' cwd, the one tree tools can write

Upstream keeps S inside A (`A/.murmur/<id>`, or A itself without --workdir). Here S is never
beneath A: Landlock grants tools write access to A and read access to S/logs only, so even a tool
running as mur's own uid cannot touch the trace, the logs or the results; and the runtime reaches
into A only through mur.fsafe (no link followed, nothing outside A). A must not contain the
manifest directory or mur's own state (~/.murmur, the compile cache): a tool could rewrite what a
later run loads (its own capabilities, a prompt that is a link to a root-only file...).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mur import paths
from mur.errors import MurError
from mur.fsafe import LinkRefused, Tree, inside

WORK = "work"
TASK_FILES = ("task.md", "input.txt")
MAX_TASK_BYTES = 16 << 20


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
        return self.accessible / "tools"

    @property
    def trace(self) -> Path:
        return self.session / "trace.jsonl"

    @property
    def result(self) -> Path:
        return self.out / "result.txt"

    @property
    def bootstrap_log(self) -> Path:
        return self.logs / "bootstrap.log"

    @property
    def murmur_md(self) -> Path:
        return self.accessible / "MURMUR.md"


def plan_workdir(manifest_dir: Path, session_id: str, workdir: Path | None) -> Workdir:
    """Where this session's directories go (nothing is created); E-IO-002 for a --workdir that holds
    mur's own state."""
    default = (Path(manifest_dir) / "workdir" / session_id).resolve()
    if workdir is None:
        return Workdir(default / WORK, default)
    accessible = Path(workdir).resolve()
    for what, path in (("the capsule's manifest directory", Path(manifest_dir)),
                       ("mur's home (~/.murmur)", paths.murmur_home()), ("the compile cache", paths.cache_root())):
        if inside(path, accessible):
            raise MurError(
                "E-IO-002",
                f"--workdir {accessible} contains {what} at {path}: its tools could rewrite what later runs load "
                "(murmur.yaml, prompts, artifacts, compiled components)",
                "pass a --workdir that does not contain it (a directory of its own, or point HOME / MUR_CACHE_DIR "
                "elsewhere)",
            )
    # The session record stays beside the manifest unless the tools could write it there (inside
    # --workdir) or mur cannot (a read-only capsule directory, e.g. /capsule in an image).
    beside = not inside(default, accessible) and _creatable(default)
    return Workdir(accessible, default if beside else paths.sessions_dir() / session_id)


def _creatable(path: Path) -> bool:
    """Whether this process may create `path`: its nearest existing ancestor is writable."""
    for parent in (path, *path.parents):
        if parent.exists():
            return parent.is_dir() and os.access(parent, os.W_OK | os.X_OK)
    return False


def create_workdir(wd: Workdir) -> None:
    """Create the layout; E-IO-002/003 when the filesystem refuses (or a link is in the way)."""
    try:
        wd.session.parent.mkdir(parents=True, exist_ok=True)
        wd.session.mkdir(mode=0o755)  # new: a session id is never reused
        with Tree(wd.session) as session:
            for sub in ("out", "logs"):
                os.close(session.makedirs(sub))
        wd.accessible.mkdir(parents=True, exist_ok=True)
        with Tree(wd.accessible) as accessible:
            os.close(accessible.own_dir("tools"))
    except LinkRefused as exc:
        raise refused(exc, wd.accessible) from exc
    except PermissionError as exc:
        raise MurError("E-IO-002", f"failed to create workdir at {wd.session}: {exc.strerror}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to create workdir at {wd.session}: {exc.strerror or exc}") from exc


def refused(exc: OSError, root: Path | str) -> MurError:
    """E-IO-002 for a path the runtime would not follow (mur.fsafe.LinkRefused)."""
    where = Path(root) / exc.filename if exc.filename else Path(root)
    return MurError("E-IO-002", f"refusing {where}: {exc.strerror} (the runtime never follows a link in the workdir)",
                    "remove the link; the tools' workdir holds only regular files and directories")


def write_task_input(wd: Workdir, task: str | None) -> str | None:
    """`--task`: an existing file is copied to task.md, anything else is the literal task text.

    Returns the task text from task.md / input.txt (first present), or None. Runs before any tool:
    the text the model gets is read here once, never through a link (a previous run's tools may
    have left one), and task.md is written by rename, never through whatever name is there.
    """
    try:
        with Tree(wd.accessible) as tree:
            if task is not None:
                tree.write_text("task.md", _task_text(task, wd.accessible), durable=False)  # rewritten each session
            for name in TASK_FILES:
                st = tree.lstat(name)
                if st is not None:
                    return tree.read_text(name, MAX_TASK_BYTES)
    except LinkRefused as exc:
        raise refused(exc, wd.accessible) from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to use the task file in {wd.accessible}: {exc.strerror or exc}") from exc
    return None


def _task_text(task: str, accessible: Path) -> str:
    """The --task value: a file's content (read without following links when it is in the workdir)."""
    source = Path(task)
    if len(task) >= 4096 or "\n" in task or not source.is_file():
        return task
    if inside(source, accessible):
        with Tree(accessible) as tree:
            return tree.read_text(os.path.relpath(os.path.abspath(source), accessible), MAX_TASK_BYTES)
    return source.read_text(encoding="utf-8", errors="replace")
