"""A capsule as a service: the lifecycle loop around a task executor, behind the A2A door.

``mur run`` builds a :class:`CapsuleService` with its executor (the agent loop), calls
``start()`` (binds, serves, returns the ``MURMUR_CAPSULE_URL`` form ``localhost:<port>``),
``run(initial_task)`` (blocks until the lifecycle says the session is over) and ``stop()``.

Lifecycle (spec "Lifecycle", upstream ``runtime.rs``):

* ``none``   — runs ``initial_task`` (task.md) if given, then returns; every message/send and
  message/stream is answered -32601. tasks/get and stream/watch are still served.
* ``single`` — runs ``initial_task`` if given and returns; otherwise runs the first A2A task and
  returns. A message while a task is active (or after it) gets ``state: rejected``. When no task
  arrives within the idle timeout the executor runs once with an empty task (backward-compatible
  fallback), then the session ends.
* ``queue``  — at most ``queue_depth`` tasks wait (not yet started); more are ``rejected``.
  Tasks run one at a time, in arrival order. ``initial_task`` (if any) runs first. With
  ``after_task: exit`` the session ends after the first A2A task finishes (spec: "exit
  immediately"); with ``sleep`` it keeps taking tasks. Either way, the idle timeout with nothing
  to do ends the session cleanly. Tasks still waiting when the session ends are ``rejected``.

Idle timeout: ``idle_timeout`` argument, else ``MURMUR_A2A_TIMEOUT_SECS``, else 30 s; 0 means wait
forever (long-lived deployed services).

SIGTERM (when ``run`` is called on the main thread): stop accepting (waiting tasks -> rejected),
let the running task finish for up to ``term_grace`` seconds (``TaskContext.cancelled`` turns
true so an executor can wrap up early; a task waiting in request-input fails "terminated"), then
interrupt the executor with :class:`Terminated` (the task fails), flush the trace and return.
A second SIGTERM interrupts at once.

SIGINT (Ctrl-C; ``mur run`` delivers it as one KeyboardInterrupt, see mur.wasm.interrupt): the
running task ends failed "interrupted" (its task_end says ``interrupted``), waiting tasks are
rejected, no linger, and ``interrupted`` is true; a Ctrl-C while waiting for a task ends the session too.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from mur import ids
from mur.a2a import conversation, protocol
from mur.a2a.auth import DoorAuth, require_token_off_loopback
from mur.a2a.listen import DoorLimits, LazyDoor, bind_socket, capsule_url
from mur.a2a.sse import BUFFER_CAPACITY, EventHub
from mur.a2a.tasks import (
    CANCELED_MESSAGE,
    COMPLETED,
    FAILED,
    INPUT_TIMEOUT,
    InputWaitEnded,
    Task,
    TaskRegistry,
)
from mur.errors import MurError
from mur.trace import events as ev

DEFAULT_IDLE_TIMEOUT = 30.0
DEFAULT_TERM_GRACE = 5.0
DEFAULT_LINGER = 2.0
# Seconds without a task after which the session gives back what it can load again (on_idle): long
# enough that a stream of tasks never pays for reloading, short enough that an idle capsule is lean.
IDLE_LET_GO_SECS = 10.0
TERMINATED_MESSAGE = "terminated: the capsule received SIGTERM"
INTERRUPTED_MESSAGE = "interrupted: the capsule received SIGINT (Ctrl-C)"


@dataclass
class TaskRequest:
    """What the executor is asked to do."""

    task_id: str
    context_id: str
    message_id: str | None
    text: str
    source: str  # "a2a" | "task_md"
    traceparent: str | None = None
    history: list[dict] | None = None  # threaded mode: prior conversation of this context, if any


class TaskContext(Protocol):
    """What the executor can do while a task runs."""

    task_id: str
    context_id: str

    def request_input(self, prompt: str) -> str:
        """Block until a message/send delivers the reply (the task shows input-required meanwhile).

        Raises :class:`InputWaitEnded` with reason ``"input-timeout"`` after
        ``lifecycle.input_timeout_secs`` (the task then ends failed "input-timeout" whatever the
        executor returns) or ``"terminated"`` on SIGTERM.
        """
        ...

    def emit(self, event: str, data: dict) -> None:
        """Publish a stream frame for this task: ``status`` (``{"state": "working", "message"}``),
        ``artifact`` (``{"tool_name", "content", ...}``), ``text`` / ``thinking``
        (``{"text", "final"?}``)."""
        ...

    @property
    def cancelled(self) -> bool:
        """True once the session is shutting down (SIGTERM): finish or fail soon."""
        ...

    def stop_reason(self) -> str | None:
        """Why the executor should stop now (an accepted tasks/cancel), or None to carry on.

        Checked between steps (before each model turn, before a turn's tool calls): an executor
        that stops returns a failed outcome with this text; the service records it as canceled.
        SIGTERM is not reported here: the running task keeps its grace period to finish
        (``cancelled`` says a shutdown is under way).
        """
        ...


@dataclass
class TaskOutcome:
    """How a task ended."""

    state: str  # "completed" | "failed"
    text: str  # the result, or the error message
    history: list[dict] | None = None  # threaded: the history to persist (only used on success)
    stats: dict = field(default_factory=dict)  # turns, input_tokens, output_tokens, tool_calls, shell_calls, reopen_count
    interrupted: bool = False  # ended by Ctrl-C (task_end says `interrupted`)


Executor = Callable[[TaskRequest, TaskContext], TaskOutcome]
STAT_KEYS = ("turns", "input_tokens", "output_tokens", "tool_calls", "shell_calls", "reopen_count")


class Terminated(BaseException):
    """Raised into a running executor when SIGTERM's grace period is over.

    A BaseException so that an executor's ``except Exception`` does not swallow it.
    """


def _env_seconds(name: str, default: float) -> float:
    """``float($name)``, or ``default`` when it is unset or not a number."""
    try:
        return float(os.environ.get(name, "").strip() or default)
    except ValueError:
        return default


def resolve_idle_timeout(value: float | None) -> float | None:
    """Seconds to wait for a task; None = forever. Argument, else MURMUR_A2A_TIMEOUT_SECS, else 30."""
    if value is None:
        value = _env_seconds("MURMUR_A2A_TIMEOUT_SECS", DEFAULT_IDLE_TIMEOUT)
    if value < 0:
        value = DEFAULT_IDLE_TIMEOUT
    return None if value == 0 else value


def lifecycle_with_overrides(lifecycle: Any, task_acceptance: str | None = None, after_task: str | None = None) -> Any:
    """``lifecycle`` with the ``--lifecycle-task-acceptance`` / ``--lifecycle-after-task`` overrides."""
    update = {}
    if task_acceptance is not None:
        if task_acceptance not in ("none", "single", "queue"):
            raise MurError(
                "E-MAN-003",
                f"--lifecycle-task-acceptance must be one of: none, single, queue; got '{task_acceptance}'",
            )
        update["task_acceptance"] = task_acceptance
    if after_task is not None:
        if after_task not in ("exit", "sleep"):
            raise MurError("E-MAN-003", f"--lifecycle-after-task must be one of: exit, sleep; got '{after_task}'")
        update["after_task"] = after_task
    return lifecycle.model_copy(update=update) if update else lifecycle


class _Context:
    """The TaskContext handed to the executor for one task."""

    def __init__(self, service: "CapsuleService", task: Task):
        self._service = service
        self.task_id = task.id
        self.context_id = task.context_id

    def request_input(self, prompt: str) -> str:
        svc = self._service
        timeout = svc.lifecycle.input_timeout_secs
        announce = lambda: svc._publish_status(self.task_id, self.context_id, "input-required", prompt)  # noqa: E731
        reply = svc.registry.wait_for_input(self.task_id, prompt, timeout, on_marked=announce)
        svc._publish_status(self.task_id, self.context_id, "working", "input received")
        return reply

    def emit(self, event: str, data: dict) -> None:
        svc = self._service
        if event == "status":
            state = data.get("state", "working")
            if state != "working":
                raise ValueError("an executor may only emit working status frames; the service ends tasks")
            svc._publish_status(self.task_id, self.context_id, "working", str(data.get("message", "")))
        elif event == "artifact":
            svc.hub.publish("artifact", protocol.artifact_frame(self.task_id, self.context_id, dict(data)))
        elif event in ("text", "thinking"):
            frame = protocol.text_frame(self.task_id, str(data.get("text", "")), bool(data.get("final", False)))
            svc.hub.publish(event, frame)
        else:
            raise ValueError(f"unknown stream event {event!r}")

    @property
    def cancelled(self) -> bool:
        return self._service._terminating.is_set()

    def stop_reason(self) -> str | None:
        svc = self._service
        return CANCELED_MESSAGE if svc.registry.cancel_requested(self.task_id) else None


class CapsuleService:
    """The A2A door plus the lifecycle loop that feeds the executor. See the module docstring."""

    def __init__(
        self,
        *,
        card: dict,
        lifecycle: Any,
        executor: Executor,
        trace: Callable[[dict], None],
        workdir: Path,
        bind: str = "127.0.0.1",
        port: int | None = None,
        idle_timeout: float | None = None,
        task_dir: Path | None = None,
        trace_flush: Callable[[], None] | None = None,
        term_grace: float = DEFAULT_TERM_GRACE,
        max_body: int = protocol.MAX_BODY,
        sse_buffer: int = BUFFER_CAPACITY,
        cancel_running: bool = False,
        auth: DoorAuth | None = None,
        limits: DoorLimits | None = None,
        on_wait: Callable[[float | None], None] | None = None,
        on_idle: Callable[[], None] | None = None,
        idle_let_go: float = IDLE_LET_GO_SECS,
        raise_into: Callable[[BaseException], None] | None = None,
    ):
        self.lifecycle = lifecycle
        self._on_wait = on_wait  # hears each wait for an A2A task (its timeout; None = forever)
        # called once a wait for a task has lasted IDLE_LET_GO_SECS: the session gives back what it
        # can load again (mur.wasm.engine.WasmEngine.let_go)
        self._on_idle = on_idle
        self.idle_let_go = idle_let_go
        # How a signal handler raises into the running executor (mur run: mur.wasm.interrupt.raise_soon,
        # which waits until guest code is stopped); default: at once.
        self._raise_into = raise_into or _raise
        self.executor = executor
        self.workdir = Path(workdir)
        # task.md's directory (the tools' workdir) and out/, held open from the first task
        self._files = conversation.TaskFiles(self.workdir, Path(task_dir) if task_dir is not None else self.workdir)
        self.idle_timeout = resolve_idle_timeout(idle_timeout)
        self.term_grace = term_grace
        self.last_error: BaseException | None = None
        self.registry = TaskRegistry(lifecycle.task_acceptance, lifecycle.queue_depth, cancel_running)
        self.hub = EventHub(sse_buffer)
        self._trace = trace
        self._trace_flush = trace_flush
        self._bind = bind
        self._port = port
        self._card = card
        self._max_body = max_body
        self._auth = auth or DoorAuth()
        self._limits = limits or DoorLimits.from_env()
        self._server: LazyDoor | None = None
        self.url: str | None = None
        self._terminating = threading.Event()
        self._in_executor = False
        self._forced = False
        self._raised = False
        self._sigterm_seen = False
        self.interrupted = False  # a Ctrl-C ended the session (the running task, or the wait for one)
        self.last_task: Task | None = None  # the last task that ended (its result is out/result.txt)

    @property
    def task_dir(self) -> Path:
        return self._files.task_dir

    @task_dir.setter
    def task_dir(self, path: Path) -> None:
        self._files.task_dir = Path(path)

    @property
    def threaded(self) -> bool:
        return self.lifecycle.conversation == "threaded"

    @property
    def keeps_serving(self) -> bool:
        """queue + sleep: a service whose session outcome is its own, not that of any one task."""
        return self.lifecycle.task_acceptance == "queue" and self.lifecycle.after_task == "sleep"

    # --- server -------------------------------------------------------------------------------

    def start(self, lazy: bool = True) -> str:
        """Bind (E-RUN-010 when the port is taken; E-A2A-005 off loopback without a token) and serve
        in the background; returns ``localhost:<port>`` (``https://localhost:<port>`` with TLS).
        `lazy`: the HTTP server is loaded at the first connection (mur.a2a.listen; TLS never waits)."""
        sock = bind_socket(self._bind, self._port, check=lambda address: require_token_off_loopback(address, self._auth))
        port = sock.getsockname()[1]
        self.url = capsule_url(self._bind, port, tls=self._auth.tls)

        def serve() -> Any:
            from mur.a2a.server import Door, ServerThread

            door = Door(
                registry=self.registry,
                hub=self.hub,
                card=self._card,
                task_acceptance=self.lifecycle.task_acceptance,
                conversation=self.lifecycle.conversation,
                fallback_host=capsule_url(self._bind, port),
                max_body=self._max_body,
                auth=self._auth,
                limits=self._limits,
            )
            server = ServerThread(door, sock, self._limits, self._auth)
            server.start()
            return server

        self._server = LazyDoor(sock, serve)
        if lazy and not self._auth.tls:
            self._server.start()
        else:
            try:
                self._server.start_now()
            except BaseException:
                self._server.stop()
                self._server = None
                raise
        return self.url

    def linger(self, seconds: float | None = None) -> None:
        """After the lifecycle ended, keep answering `tasks/get` briefly so an A2A sender can still read
        the result of the task that ended the session (single mode exits right after its one task).

        MURMUR_A2A_LINGER_SECS (default 2; 0 = no linger). Skipped on SIGTERM and when no task came over A2A.
        """
        if seconds is None:
            seconds = _env_seconds("MURMUR_A2A_LINGER_SECS", DEFAULT_LINGER)
        if seconds <= 0 or self._terminating.is_set() or not self.registry.served_a2a():
            return
        self._terminating.wait(seconds)

    def stop(self) -> None:
        """End open streams and stop the server (tasks still waiting are rejected first)."""
        self._reject_waiting()
        self.hub.close()
        if self._server is not None:
            self._server.stop()
            self._server = None

    # --- lifecycle ----------------------------------------------------------------------------

    def run(self, initial_task: str | None = None) -> str:
        """Run the lifecycle to its end; returns the session status ``"ok"`` or ``"failed"``."""
        previous = None
        on_main = threading.current_thread() is threading.main_thread()
        if on_main:
            previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            return self._lifecycle(initial_task)
        except KeyboardInterrupt:  # while waiting for a task, or between tasks: the session ends
            self._interrupted()
            return "failed"
        finally:
            self._reject_waiting()
            self.linger()  # with the SIGTERM handler still installed, so a SIGTERM ends it at once
            if on_main:
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            self._flush()
            self._files.close()  # here: the tasks' own thread, the only one that writes them

    def _lifecycle(self, initial_task: str | None) -> str:
        acceptance = self.lifecycle.task_acceptance
        if initial_task is not None:
            state = self._run_local(initial_task)
            if acceptance != "queue":
                return _status(state)
        elif acceptance == "none":
            return "ok"
        while not self._terminating.is_set():
            if self._on_wait is not None and not self.registry.has_pending():
                self._on_wait(self.idle_timeout)
            task = self._take()
            if task is None:
                if self._terminating.is_set() or acceptance == "queue":
                    return "ok"
                # single: nothing arrived in time -> the backward-compatible empty-task run.
                return _status(self._run_local(""))
            state = self._run(task)
            if acceptance == "single" or self.lifecycle.after_task == "exit":
                return _status(state)
        return "ok"

    def _take(self) -> Task | None:
        """The next task within the idle timeout. A wait that lasts IDLE_LET_GO_SECS calls
        ``on_idle`` once, then goes on for the rest of the timeout."""
        timeout, first = self.idle_timeout, self.idle_let_go
        if self._on_idle is None or (timeout is not None and timeout <= first):
            return self.registry.take(timeout)
        task = self.registry.take(first)
        if task is not None or self._terminating.is_set():
            return task
        try:
            self._on_idle()
        except Exception:  # noqa: BLE001, S110 - giving memory back is a saving, never a reason to end
            pass
        return self.registry.take(None if timeout is None else timeout - first)

    def _run_local(self, text: str) -> str:
        task = Task(id=ids.task_id(), context_id=ids.context_id(), message_id=None, text=text, source="task_md")
        self.registry.start_local(task)
        return self._run(Task(**task.__dict__))

    def _run(self, task: Task) -> str:
        """Run one started task through the executor; record, persist and announce its end.

        A failure of this task's own work (task.md, the executor, result or history files) fails
        this task and the session goes on. Only a failing trace write ends the session (upstream's
        rule: nothing could be recorded any more), and even then the task ends in the registry
        and on the stream, failed, before the error propagates.
        """
        final = None
        try:
            started = time.monotonic()
            self._trace_begin(task)
            self._publish_status(task.id, task.context_id, "working", "task started")
            outcome = self._step(self._stage_input, task) or self._execute(task)
            if self.registry.get(task.id).timed_out:
                outcome = TaskOutcome(FAILED, INPUT_TIMEOUT, stats=outcome.stats)
            state = COMPLETED if outcome.state == COMPLETED else FAILED
            failed_output = self._step(self._write_outputs, task, state, outcome)
            if failed_output is not None and state == COMPLETED:  # a failed task keeps its first reason
                state, outcome = FAILED, TaskOutcome(FAILED, failed_output.text, stats=outcome.stats)
            self._trace_end(task, state, outcome, started)
            message = "task completed" if state == COMPLETED else outcome.text
            response = outcome.text if state == COMPLETED else None
            final = self.registry.finish(task.id, state, message, response)
        finally:
            if final is None:
                final = self.registry.finish(task.id, FAILED, "the session failed while running this task", None)
            self.last_task = final
            self._publish_status(final.id, final.context_id, final.state, final.message, final.response, final=True)
        return final.state

    def _step(self, work: Callable[..., None], *args: Any) -> TaskOutcome | None:
        """Run one piece of a task's own work; its failure is a failed outcome (kept in ``last_error``)."""
        try:
            work(*args)
            return None
        except MurError as exc:
            self.last_error = exc
            return TaskOutcome(FAILED, exc.message)
        except Exception as exc:  # noqa: BLE001 - one task's failure must not end the session
            self.last_error = exc
            return TaskOutcome(FAILED, f"internal error: {type(exc).__name__}: {exc}")

    def _stage_input(self, task: Task) -> None:
        if task.source == "a2a":
            self._files.write_task_md(task.text)

    def _trace_begin(self, task: Task) -> None:
        """The a2a_task_received (A2A tasks) and task_start trace events."""
        if task.source == "a2a":
            self._trace(
                {
                    "event_type": ev.A2A_TASK_RECEIVED,
                    "task_id": task.id,
                    "context_id": task.context_id,
                    "message_id": task.message_id,
                    "traceparent_from_caller": task.traceparent,
                }
            )
        self._trace(
            {
                "event_type": ev.TASK_START,
                "task_id": task.id,
                "context_id": task.context_id,
                "source": task.source,
                "message_parts_bytes": len(task.text.encode("utf-8", "replace")),
            }
        )

    def _trace_end(self, task: Task, state: str, outcome: TaskOutcome, started: float) -> None:
        """The task_end trace event (a failed one says why in ``error``), flushed."""
        end: dict[str, Any] = {
            "event_type": ev.TASK_END,
            "task_id": task.id,
            "exit_status": "ok" if state == COMPLETED else "interrupted" if outcome.interrupted else "failed",
            "duration_ms": int((time.monotonic() - started) * 1000),
        }
        for key in STAT_KEYS:
            end[key] = int(outcome.stats.get(key, 0) or 0)
        if state != COMPLETED:
            end["error"] = protocol.unicode_text(outcome.text)
        self._trace(end)
        self._flush()

    def _write_outputs(self, task: Task, state: str, outcome: TaskOutcome) -> None:
        """Result files, threaded history (success only), and task.md removal in queue mode."""
        try:
            self._files.write_results(task.id, state, outcome.text, per_task=self.threaded)
            if self.threaded and state == COMPLETED and outcome.history is not None:
                conversation.save_history(self.workdir, task.context_id, outcome.history)
        finally:
            if self.lifecycle.task_acceptance == "queue":
                self._files.remove_task_md()

    def _execute(self, task: Task) -> TaskOutcome:
        """Call the executor; any exception becomes a failed outcome (kept in ``last_error``)."""
        history = None
        try:
            if self.threaded:
                history = conversation.load_history(self.workdir, task.context_id)
        except MurError as exc:
            self.last_error = exc
            return TaskOutcome(FAILED, exc.message)
        request = TaskRequest(
            task_id=task.id,
            context_id=task.context_id,
            message_id=task.message_id,
            text=task.text,
            source=task.source,
            traceparent=task.traceparent,
            history=history,
        )
        try:
            self._in_executor = True
            try:
                if self._forced:  # the SIGTERM grace ran out before this executor even began
                    raise Terminated()
                outcome = self.executor(request, _Context(self, task))
            finally:
                self._in_executor = False
            if not isinstance(outcome, TaskOutcome):
                raise TypeError(f"the executor returned {type(outcome).__name__}, not TaskOutcome")
            return outcome
        except Terminated:
            return TaskOutcome(FAILED, TERMINATED_MESSAGE)
        except KeyboardInterrupt:
            self._interrupted()
            return TaskOutcome(FAILED, INTERRUPTED_MESSAGE, interrupted=True)
        except InputWaitEnded as exc:
            if exc.reason == "canceled":
                return TaskOutcome(FAILED, CANCELED_MESSAGE)
            return TaskOutcome(FAILED, TERMINATED_MESSAGE if exc.reason == "terminated" else exc.reason)
        except MurError as exc:
            self.last_error = exc
            return TaskOutcome(FAILED, exc.message)
        except Exception as exc:  # noqa: BLE001 - a failing task must not end a queue service
            self.last_error = exc
            return TaskOutcome(FAILED, f"{type(exc).__name__}: {exc}")

    # --- SIGTERM, SIGINT -----------------------------------------------------------------------

    def _interrupted(self) -> None:
        self.interrupted = True
        self.shutdown()

    def shutdown(self) -> None:
        """Stop at once, from any thread: no new tasks, waiting ones rejected, waits woken.

        The running executor is not interrupted; it sees ``TaskContext.cancelled``.
        """
        self._terminating.set()
        self._stop_accepting()

    def _stop_accepting(self) -> None:
        self.registry.stop()
        self._reject_waiting()

    def _reject_waiting(self) -> None:
        """Close the registry; every task still waiting ends rejected, on the stream too."""
        for task in self.registry.close():
            self._publish_status(task.id, task.context_id, task.state, task.message, final=True)

    def _on_sigterm(self, signum, frame) -> None:
        if not self._sigterm_seen:
            self._sigterm_seen = True
            self._terminating.set()
            # Handlers run between bytecodes of the main thread, maybe inside registry calls: the
            # rest happens on a helper thread.
            threading.Thread(target=self._graceful, name="mur-a2a-sigterm", daemon=True).start()
            return
        # Second signal (sent by the grace timer, or by the operator): interrupt the executor.
        self._forced = True
        if self._in_executor and not self._raised:
            self._raised = True
            self._raise_into(Terminated())

    def _graceful(self) -> None:
        self._stop_accepting()
        if not self.registry.wait_idle(self.term_grace):
            os.kill(os.getpid(), signal.SIGTERM)

    # --- helpers ------------------------------------------------------------------------------

    def _publish_status(self, task_id, context_id, state, message, response=None, final=False) -> None:
        self.hub.publish("status", protocol.status_frame(task_id, context_id, state, message, response, final))

    def _flush(self) -> None:
        if self._trace_flush is not None:
            self._trace_flush()


def _raise(exc: BaseException) -> None:
    raise exc


def _status(state: str) -> str:
    return "ok" if state == COMPLETED else "failed"
