"""What a task leaves in the session workdir: results, threaded history, task.md.

* ``out/result.txt`` — the last task's result text, or ``error: <message>`` when it failed;
* ``out/result_<taskId>.txt`` — the same per task, with ``lifecycle.conversation: threaded``;
* ``contexts/<contextId>/history.json`` — threaded mode: the conversation of one context, written
  only after a successful task (a failed task leaves the last good history in place);
* ``task.md`` (accessible workdir) — the task text, written before each A2A task runs.

Results and history live in the session directory, which no tool can write; task.md lives in the
tools' workdir and is written through mur.fsafe. Results and history are written atomically (temp
file in the same directory, then renamed in), so a reader never sees half a file. History is also
fsynced (a conversation must survive a crash). The result files, rewritten for every task and
carried by the task's answer and its trace anyway, are not: the old file is exchanged for the new one
(mur.fsafe.write_atomic_at's `swap`), which keeps a busy queue service at a thousand tasks a second
on ext4 where fsync and rename-over cost milliseconds each.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mur.a2a.protocol import dumps, unicode_text
from mur.errors import MurError
from mur.fsafe import Tree, write_atomic_at
from mur.fsutil import atomic_write_text, writing


def atomic_write(path: Path, data: str) -> None:
    """Write ``data`` (UTF-8) to ``path`` atomically and durably, creating parent directories."""
    atomic_write_text(path, data)


def replace_result(path: Path, data: str) -> None:
    """Write ``data`` (UTF-8) to ``path`` atomically, not durably (see the module docstring)."""
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            write_atomic_at(fd, path.name, data.encode("utf-8"), 0o644, durable=False, swap=True)
        finally:
            os.close(fd)


def result_text(state: str, text: str) -> str:
    """What result files hold: the result, or ``error: <message>`` for a failed task (as UTF-8 can
    hold it: a lone surrogate from a model or tool becomes U+FFFD)."""
    return unicode_text(text if state == "completed" else f"error: {text}")


def write_results(workdir: Path, task_id: str, state: str, text: str, per_task: bool) -> None:
    """``out/result.txt`` and, when ``per_task``, ``out/result_<task_id>.txt``."""
    content = result_text(state, text)
    try:
        replace_result(workdir / "out" / "result.txt", content)
        if per_task:
            replace_result(workdir / "out" / f"result_{task_id}.txt", content)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot write the task result under {workdir / 'out'}: {exc}") from exc


def history_path(workdir: Path, context_id: str) -> Path:
    return workdir / "contexts" / context_id / "history.json"


def load_history(workdir: Path, context_id: str) -> list | None:
    """The persisted history of ``context_id`` (a JSON list), or None when it has none yet."""
    path = history_path(workdir, context_id)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot read {path}: {exc}") from exc
    try:
        history = json.loads(raw)
    except ValueError as exc:
        raise MurError("E-IO-003", f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(history, list):
        raise MurError("E-IO-003", f"{path} must hold a JSON array")
    return history


def save_history(workdir: Path, context_id: str, history: list) -> None:
    """Persist ``history`` for ``context_id`` atomically."""
    path = history_path(workdir, context_id)
    try:
        atomic_write(path, dumps(history))
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot write {path}: {exc}") from exc


def write_task_md(task_dir: Path, text: str) -> None:
    """``task.md`` holds the running task's text (upstream writes it for every A2A task).

    task_dir is the tools' workdir: the file is replaced by rename (whatever a tool left under that
    name, a link included, is replaced, never written through). No fsync: nothing reads it until the
    executor starts, and it is scratch input rewritten for every task.
    """
    try:
        with Tree(task_dir, create=True) as tree:
            tree.write_text("task.md", text, durable=False)
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot write {task_dir / 'task.md'}: {exc.strerror or exc}") from exc


def remove_task_md(task_dir: Path) -> None:
    """Delete ``task.md`` (queue mode, after each task); missing is fine. A link is removed, never followed."""
    try:
        with Tree(task_dir) as tree:
            tree.unlink("task.md")
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot remove {task_dir / 'task.md'}: {exc.strerror or exc}") from exc
