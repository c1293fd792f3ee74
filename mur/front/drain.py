"""Which backend owns which task, and following a draining backend's tasks to their end.

Every task id (`tsk_` + 32 hex) in a backend's answer belongs to that backend: the front learns it
from `message/send` results and stream frames as they pass. When a backend drains, its open tasks
are asked for (`tasks/get`, with the deployment's token) until each has ended; their last answer is
kept, so `tasks/get` keeps working after the backend is gone. A backend is drained when none of its
tasks is open and no request to it is in flight, or when its drain timeout passed (a client holding
`stream/watch` open, a task waiting for input nobody gives).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

TASK_ID = re.compile(rb"tsk_[0-9a-f]{32}")
TERMINAL = frozenset({"completed", "failed", "canceled", "rejected"})
POLL = 0.25


class TaskBook:
    """Task id -> owning backend (bounded, oldest forgotten first) and finished tasks' last answers."""

    def __init__(self, owned: int = 100_000, cached: int = 1_000):
        self.owner: OrderedDict[str, str] = OrderedDict()
        self.cached: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._owned, self._cached = owned, cached
        self.changed = False  # the cache changed since it was last saved

    def saved(self) -> dict[str, Any]:
        """The finished tasks and their owners, for tasks.json (a successor front reads it)."""
        return {"tasks": [[tid, self.owner.get(tid, ""), result] for tid, result in self.cached.items()]}

    def restore(self, data: Any) -> None:
        for item in (data or {}).get("tasks") or () if isinstance(data, dict) else ():
            if isinstance(item, list) and len(item) == 3 and isinstance(item[2], dict):
                tid, owner, result = str(item[0]), str(item[1]), item[2]
                self.owner.setdefault(tid, owner)
                if tid not in self.cached:
                    self.keep(tid, result)

    def learn(self, data: bytes, backend: str) -> None:
        for match in TASK_ID.finditer(data):
            tid = match.group().decode()
            self.owner[tid] = backend
            self.owner.move_to_end(tid)
        while len(self.owner) > self._owned:
            self.owner.popitem(last=False)

    def owner_of(self, tid: str) -> str | None:
        return self.owner.get(tid)

    def owned_by(self, backend: str) -> list[str]:
        return [t for t, b in self.owner.items() if b == backend]

    def keep(self, tid: str, result: dict[str, Any]) -> None:
        self.changed = True
        self.cached[tid] = result
        self.cached.move_to_end(tid)
        while len(self.cached) > self._cached:
            self.cached.popitem(last=False)

    def forget(self, tid: str) -> None:
        self.owner.pop(tid, None)

    def retire(self, backend: str) -> None:
        """The backend is gone: what it owned is answered from the cache, or not at all."""
        for tid in self.owned_by(backend):
            if tid not in self.cached:
                del self.owner[tid]


@dataclass
class DrainStatus:
    since: float
    open_tasks: int = 0
    inflight: int = 0
    drained: bool = False
    timed_out: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"draining_for": round(time.monotonic() - self.since, 1), "open_tasks": self.open_tasks,
                "inflight": self.inflight, "drained": self.drained, "timed_out": self.timed_out}


# (backend name, task id) -> the tasks/get result, None when the backend does not know the task,
# or raises OSError when it cannot be asked right now.
TaskQuery = Callable[[str, str], Awaitable["dict[str, Any] | None"]]


async def follow(name: str, book: TaskBook, status: DrainStatus, query: TaskQuery, inflight: Callable[[], int],
                 still_draining: Callable[[], bool], timeout: float, changed: Callable[[], None]) -> None:
    """Poll the open tasks of a draining backend until it is drained (or no longer draining)."""
    while still_draining():
        open_now = 0
        for tid in book.owned_by(name):
            if tid in book.cached:
                continue
            try:
                result = await query(name, tid)
            except OSError:
                open_now += 1  # it cannot answer right now (restarting): still open
                continue
            if result is None:
                book.forget(tid)
            elif (result.get("status") or {}).get("state") in TERMINAL:
                book.keep(tid, result)
            else:
                open_now += 1
        before = (status.open_tasks, status.inflight, status.drained)
        status.open_tasks, status.inflight = open_now, inflight()
        if not status.drained and open_now == 0 and status.inflight == 0:
            status.drained = True
        elif not status.drained and time.monotonic() - status.since > timeout:
            status.drained = status.timed_out = True
        if (status.open_tasks, status.inflight, status.drained) != before:
            changed()
        await asyncio.sleep(POLL)
