"""A session's tool processes, found and killed without a cgroup of the session's own.

Where the aggregate bound is the cgroup mur itself runs in (``enclosing.py``) there is no session
cgroup to list or kill, so the tools are told apart by kernel state they cannot change:

* **they descend from mur**: mur marks itself a child subreaper, so a tool's orphans (a ``setsid``
  daemon whose parent exited) are re-parented to mur instead of init, and stay in mur's tree
  (tools are children of the session's spawner, which is no subreaper: the kernel passes over it;
  in a pid namespace orphans go to its init, a descendant of mur's namespace holder);
* **they carry the session's seccomp programs**: a seccomp filter can never be removed, so every
  tool and everything it starts has at least mur's own ``Seccomp_filters`` + 2 in
  ``/proc/<pid>/status`` (two programs: the allowlist and the argument rules). So does the
  session's spawner (``zygote.py``), which the caller passes in ``exclude``; mur's other children
  (the namespace holder, a ``claude`` CLI) have mur's count.

``kill_tools`` stops them all first (SIGSTOP cannot be caught, a stopped process cannot fork), then
kills them, until none is left; ``reap`` collects the zombies of re-parented orphans (never a pid
mur waits for itself, such as a running call's).
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from typing import Iterable

from mur.digits import is_digits

PR_SET_CHILD_SUBREAPER = 36
SESSION_FILTERS = 2  # seccomp.install() loads two programs per tool
_libc = ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> bool:
    """Make orphans of this process's descendants its children (prctl; unprivileged)."""
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _status(pid: str, proc: str) -> tuple[int, int | None, int, str] | None:
    """(ppid, Seccomp_filters or None when the kernel has no such line, Seccomp mode, state)."""
    ppid = mode = 0
    filters: int | None = None
    state = "?"
    try:
        with open(os.path.join(proc, pid, "status")) as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key == "State":
                    state = value.strip()[:1]
                elif key == "PPid":
                    ppid = int(value)
                elif key == "Seccomp":
                    mode = int(value)
                elif key == "Seccomp_filters":
                    filters = int(value)
                    break
    except (OSError, ValueError):
        return None
    return ppid, filters, mode, state


def tool_processes(root: int | None = None, proc: str = "/proc") -> dict[int, str]:
    """pid -> state ("Z" for a zombie) of every descendant of ``root`` (mur) that is a tool."""
    root = os.getpid() if root is None else root
    own = _status(str(root), proc)
    table: dict[int, tuple[int, int | None, int, str]] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return {}
    for entry in entries:
        if is_digits(entry) and int(entry) != root:
            st = _status(entry, proc)
            if st is not None:
                table[int(entry)] = st
    children: dict[int, list[int]] = {}
    for pid, st in table.items():
        children.setdefault(st[0], []).append(pid)
    found: dict[int, str] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        ppid, filters, mode, state = table[pid]
        if own is None or _is_tool(own, filters, mode):
            found[pid] = state
    return found


def _is_tool(own: tuple[int, int | None, int, str], filters: int | None, mode: int) -> bool:
    _ppid, own_filters, own_mode, _state = own
    if filters is not None and own_filters is not None:
        return filters >= own_filters + SESSION_FILTERS
    return (mode == 2 and own_mode == 0) or own_mode == 2  # no counts: the filtered ones (all, if mur is filtered)


def kill_tools(timeout: float = 5.0, exclude: Iterable[int] = ()) -> bool:
    """Stop every tool process (again, until a scan finds none still running: a stopped process
    cannot fork), then SIGKILL them all, until none is left; True when none is."""
    deadline = time.monotonic() + timeout
    while True:
        procs = tool_processes()
        running = [pid for pid, state in procs.items() if state not in ("Z", "T", "t")]
        stopped = [pid for pid, state in procs.items() if state in ("T", "t")]
        if not running and not stopped:
            reap(exclude)
            return True
        for pid in running or stopped:
            try:
                os.kill(pid, signal.SIGSTOP if running else signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if not running:
            reap(exclude)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)


def reap(exclude: Iterable[int] = ()) -> None:
    """waitpid() the zombie tools that are mur's own children (re-parented orphans) but not ``exclude``."""
    keep = set(exclude)
    me = os.getpid()
    for pid, state in tool_processes().items():
        if state != "Z" or pid in keep:
            continue
        st = _status(str(pid), "/proc")
        if st is None or st[0] != me:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
