"""The task registry: every task the door accepted, rejected or ran, and the pending queue.

One lock guards everything. HTTP handlers (on the server's event loop thread) submit tasks, read
them and deliver ``request-input`` replies; the lifecycle loop (on the thread that called
``CapsuleService.run``) takes tasks, runs them and records how they ended. Nothing here blocks for
long while holding the lock, so the event loop is never held up by a running task.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

SUBMITTED = "submitted"
WORKING = "working"
INPUT_REQUIRED = "input-required"
COMPLETED = "completed"
FAILED = "failed"
REJECTED = "rejected"
CANCELED = "canceled"
TERMINAL = frozenset({COMPLETED, FAILED, REJECTED, CANCELED})

# Status messages, worded as upstream's door words them.
REJECTED_BUSY = "task rejected: capsule is busy"
REJECTED_CLOSING = "task rejected: the session is closing"
REJECTED_SESSION_ENDED = "task rejected: the session ended before this task started"
INPUT_TIMEOUT = "input-timeout"
CANCELED_MESSAGE = "task canceled by the client"

# Finished tasks kept for tasks/get; the oldest terminal ones are forgotten past this, so a
# long-lived queue service does not grow without bound.
HISTORY_LIMIT = 10_000


@dataclass
class Task:
    """One task as the registry knows it."""

    id: str
    context_id: str
    message_id: str | None
    text: str
    source: str = "a2a"
    traceparent: str | None = None
    state: str = SUBMITTED
    prompt: str | None = None  # the request-input question while input-required
    message: str = ""  # the final status message once terminal
    response: str | None = None  # the result text of a completed task
    reply: str | None = None  # a delivered request-input reply not yet taken
    timed_out: bool = False  # request-input timed out: the task ends failed "input-timeout"
    cancel_requested: bool = False  # tasks/cancel was accepted: the task ends canceled (unless it completed)
    started: float = field(default=0.0)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class InputWaitEnded(Exception):
    """A request-input wait ended without a reply (timeout or shutdown); ``reason`` says which."""

    ends_task = True  # raised through a guest call and the agent loop, up to the service

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class TaskRegistry:
    """Thread-safe task store with a bounded pending queue and lifecycle acceptance rules."""

    def __init__(self, task_acceptance: str, queue_depth: int, cancel_running: bool = False):
        self.task_acceptance = task_acceptance
        self.queue_depth = queue_depth
        # Whether the executor stops a running task when asked (TaskContext.stop_reason); only
        # then is tasks/cancel accepted for a task that is executing.
        self.cancel_running = cancel_running
        self._cond = threading.Condition(threading.RLock())
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._pending: deque[str] = deque()
        self._active: str | None = None
        self._last: str | None = None
        self._ran_any = False
        self._closed = False
        self._stopping = False
        # task id -> callbacks run (under the lock: they must only hand off) once the task has ended
        # or waits for input: a blocking message/send answers then (Door._message_send)
        self._watchers: dict[str, list] = {}

    # --- door side ------------------------------------------------------------------------

    def submit(self, task: Task) -> Task:
        """Enqueue ``task`` if the lifecycle has room, else record it rejected.

        The registry keeps ``task`` itself; the caller gets a snapshot whose ``state`` says which
        (``submitted`` or ``rejected``) and must not touch ``task`` afterwards.
        """
        with self._cond:
            if self._can_accept():
                task.state = SUBMITTED
                self._pending.append(task.id)
                self._cond.notify_all()
            else:
                task.state = REJECTED
                task.message = REJECTED_CLOSING if self._closed else REJECTED_BUSY
                task.text = ""  # never run: a flood of large rejected sends must not stay in memory
            self._remember(task)
            return Task(**task.__dict__)

    def _can_accept(self) -> bool:
        if self._closed:
            return False
        if self.task_acceptance == "single":
            return self._active is None and not self._pending and not self._ran_any
        if self.task_acceptance == "queue":
            return len(self._pending) < self.queue_depth
        return False

    def get(self, task_id: str | None) -> Task | None:
        """The task ``task_id`` (a snapshot copy); None -> the running or last-run task."""
        with self._cond:
            key = task_id if task_id is not None else (self._active or self._last)
            task = self._tasks.get(key) if key else None
            return None if task is None else Task(**task.__dict__)

    def deliver_input(self, text: str) -> Task | None:
        """Hand ``text`` to the running task if it waits in request-input; returns it, else None."""
        with self._cond:
            task = self._tasks.get(self._active) if self._active else None
            if task is None or task.state != INPUT_REQUIRED or task.cancel_requested:
                return None
            task.reply = text
            task.state = WORKING
            task.prompt = None
            self._cond.notify_all()
            return Task(**task.__dict__)

    def cancel(self, task_id: str) -> tuple[str, Task | None]:
        """tasks/cancel: ``("dropped", snapshot)`` for a queued task (out of the queue, canceled now);
        ``("woken", snapshot)`` for one waiting in request-input (its wait ends; it ends canceled
        when its executor returns); ``("stopping", snapshot)`` for an executing task when the
        executor stops on request (it ends canceled at its next step boundary, or completed if it
        finished first); ``("not-cancelable", snapshot)`` otherwise; ``("not-found", None)``.

        An executing task is never interrupted mid-call: a tool or shell call cut short could leave
        half a change behind. The executor checks between steps (TaskContext.stop_reason).
        """
        with self._cond:
            task = self._tasks.get(task_id)
            if task is None:
                return "not-found", None
            if task.state == SUBMITTED and task_id in self._pending:
                self._pending.remove(task_id)
                task.state, task.message, task.text = CANCELED, CANCELED_MESSAGE, ""
                outcome = "dropped"
                self._settled(task)
            elif task.state == INPUT_REQUIRED and self._active == task_id:
                task.cancel_requested = True
                task.state, task.prompt, task.message = CANCELED, None, CANCELED_MESSAGE
                outcome = "woken"
            elif task.state == WORKING and self._active == task_id and self.cancel_running:
                if task.cancel_requested:
                    return "not-cancelable", Task(**task.__dict__)
                task.cancel_requested = True
                outcome = "stopping"
            else:
                return "not-cancelable", Task(**task.__dict__)
            self._cond.notify_all()
            return outcome, Task(**task.__dict__)

    def when_settled(self, task_id: str, callback) -> Task | None:
        """A snapshot of `task_id` now if it has ended or waits for input; else None, and
        `callback(snapshot)` is called (on the thread that settles it) once it does."""
        with self._cond:
            task = self._tasks.get(task_id)
            if task is None or task.terminal or task.state == INPUT_REQUIRED:
                return None if task is None else Task(**task.__dict__)
            self._watchers.setdefault(task_id, []).append(callback)
            return None

    def _settled(self, task: Task) -> None:
        """Hand `task`'s snapshot to whoever waits for it to settle (called under the lock)."""
        callbacks = self._watchers.pop(task.id, None)
        if callbacks:
            snapshot = Task(**task.__dict__)
            for callback in callbacks:
                callback(snapshot)

    # --- lifecycle side -------------------------------------------------------------------

    def take(self, timeout: float | None) -> Task | None:
        """Block until a pending task is available and start it; None on timeout or close."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._stopping or not self._pending:
                if self._closed or self._stopping:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            task = self._tasks[self._pending.popleft()]
            self._start(task)
            return Task(**task.__dict__)

    def start_local(self, task: Task) -> None:
        """Register and start a task that did not come through the door (task.md, idle run)."""
        with self._cond:
            self._remember(task)
            self._start(task)

    def _start(self, task: Task) -> None:
        task.state = WORKING
        task.started = time.monotonic()
        self._active = task.id
        self._ran_any = True

    def wait_for_input(self, task_id: str, prompt: str, timeout: float | None, on_marked=None) -> str:
        """Mark ``task_id`` input-required with ``prompt`` and block for the reply.

        ``on_marked()`` runs once the state is visible (the caller announces it there, so a client
        reacting to the announcement finds the task waiting). Raises InputWaitEnded("input-timeout")
        after ``timeout`` seconds (None: forever) and InputWaitEnded("terminated") on shutdown.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            task = self._tasks[task_id]
            task.state = INPUT_REQUIRED
            task.prompt = prompt
            task.reply = None
            self._settled(task)
            if on_marked is not None:
                on_marked()
            while task.reply is None:
                if task.cancel_requested:
                    raise InputWaitEnded("canceled")
                if self._stopping:
                    task.state, task.prompt = WORKING, None
                    raise InputWaitEnded("terminated")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    task.state, task.prompt, task.timed_out = WORKING, None, True
                    raise InputWaitEnded(INPUT_TIMEOUT)
                self._cond.wait(remaining)
            reply, task.reply = task.reply, None
            return reply

    def finish(self, task_id: str, state: str, message: str, response: str | None) -> Task:
        """Record how the running task ended; a timed-out input wait forces failed/input-timeout."""
        with self._cond:
            task = self._tasks[task_id]
            if task.cancel_requested and (task.state == CANCELED or state != COMPLETED):
                state, message, response = CANCELED, CANCELED_MESSAGE, None
            elif task.timed_out:
                state, message, response = FAILED, INPUT_TIMEOUT, None
            task.state = state
            task.message = message
            task.response = response if state == COMPLETED else None
            task.prompt = None
            task.text = ""  # its input is no longer needed; only tasks/get's fields are kept
            if self._active == task_id:
                self._active = None
            self._last = task_id
            self._settled(task)
            self._cond.notify_all()
            return Task(**task.__dict__)

    def close(self) -> list[Task]:
        """Stop accepting; every still-pending task ends rejected. Returns those tasks."""
        with self._cond:
            self._closed = True
            refused = []
            while self._pending:
                task = self._tasks[self._pending.popleft()]
                task.state = REJECTED
                task.message = REJECTED_SESSION_ENDED
                task.text = ""
                self._settled(task)
                refused.append(Task(**task.__dict__))
            self._cond.notify_all()
            return refused

    def stop(self) -> None:
        """Shutdown: wake every wait (take, request-input) so the lifecycle loop can end."""
        with self._cond:
            self._stopping = True
            self._closed = True
            self._cond.notify_all()

    def cancel_requested(self, task_id: str) -> bool:
        """Has tasks/cancel been accepted for ``task_id``?"""
        with self._cond:
            task = self._tasks.get(task_id)
            return bool(task and task.cancel_requested)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no task is running (True), or ``timeout`` seconds pass (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._active is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    @property
    def stopping(self) -> bool:
        return self._stopping

    def has_pending(self) -> bool:
        """A task is waiting to start (take() would not block)."""
        with self._cond:
            return bool(self._pending)

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state (for tests, benchmarks and diagnostics)."""
        with self._cond:
            out: dict[str, int] = {}
            for task in self._tasks.values():
                out[task.state] = out.get(task.state, 0) + 1
            return out

    def served_a2a(self) -> bool:
        """Did any task arrive over A2A (as opposed to task.md)?"""
        with self._cond:
            return any(t.source == "a2a" for t in self._tasks.values())

    def _remember(self, task: Task) -> None:
        self._tasks[task.id] = task
        excess = len(self._tasks) - HISTORY_LIMIT
        if excess > 0:
            doomed = []
            for key, old in self._tasks.items():
                if old.terminal:
                    doomed.append(key)
                    if len(doomed) >= excess:
                        break
            for key in doomed:
                del self._tasks[key]
