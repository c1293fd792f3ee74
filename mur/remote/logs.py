"""`mur deploy logs ID [-f]`: the provider's service log (mur.deploy.operations.logs) with the
deployment's task lines merged in (mur.remote.tasklog), for SSH and local deployments.

A Docker deployment's sessions live inside its container: its log is shown as the engine has it.
When the sessions cannot be read (no permission, a broken tree) the service log is still shown, with
a note saying why the task lines are missing; when the host cannot be reached at all, that error is
the answer (the service log could not be read either).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from mur.errors import MurError
from mur.remote.tasklog import Follower, LineSink, Merger, TaskLine, history, merged

Write = Callable[[str, "dict[str, Any] | None"], None]
TASKS_FROM = ("ssh", "local")


@contextlib.contextmanager
def _task_history(dep: Any, note: Callable[[str], None]) -> Iterator[tuple[Any, dict[str, list[TaskLine]], dict[str, int]]]:
    """(sessions or None, task lines per session, bytes read per trace) for the block."""
    from mur.remote.sessions import open_sessions
    from mur.remote.traces import failure, remote_errors

    with contextlib.ExitStack() as stack:
        found: tuple[Any, dict[str, list[TaskLine]], dict[str, int]] = (None, {}, {})
        if dep.provider in TASKS_FROM:
            try:
                sessions = stack.enter_context(open_sessions(dep, note))
                try:
                    found = (sessions, *history(sessions, sessions.list()))
                except remote_errors() as exc:
                    raise failure(sessions.where, exc) from exc
            except MurError as err:
                if err.code in ("E-DEPLOY-003", "E-DEPLOY-009"):  # no connection: no service log either
                    raise
                note(f"no task lines: the deployment's sessions could not be read ({err.message})")
        yield found


def deployment_logs(ident: str, lines: int, note: Callable[[str], None] = lambda _t: None) -> list[TaskLine]:
    """The last `lines` lines of the service log with the task lines in place (`record` set on those)."""
    from mur.deploy import operations
    from mur.deploy.state import DeploymentStore

    dep = DeploymentStore().find(ident)
    with _task_history(dep, note) as (_sessions, tasks, _offsets):
        text = operations.logs(dep.deployment_id, lines, False, None)
    return merged(text, tasks, lines)


def follow_logs(ident: str, lines: int, write: Write, note: Callable[[str], None] = lambda _t: None) -> None:
    """Stream the service log (its last `lines` first) with task lines, until interrupted or it ends."""
    from mur.deploy import operations
    from mur.deploy.state import DeploymentStore

    dep = DeploymentStore().find(ident)
    with _task_history(dep, note) as (sessions, tasks, offsets):
        merger = Merger(tasks, write)
        if tasks:  # sessions whose startup line is not in the window: their tasks come first
            window = operations.logs(dep.deployment_id, lines, False, None)
            probe = Merger(tasks, lambda _t, _r: None)
            for text in window.splitlines():
                probe.line(text)
            for sid in sorted(probe.pending):
                for t in merger.pending.pop(sid):
                    write(t.text, t.record)
        sink = LineSink(write, merger)
        follower = Follower(sessions, offsets, sink.task) if sessions is not None else None
        if follower is not None:
            follower.start()
        try:
            operations.logs(dep.deployment_id, lines, True, sink.data)
        finally:
            if follower is not None:
                follower.stop.set()
            sink.flush()
