"""`mur run` end to end: a :class:`Session` checked, bound, staged, its tools started, served, torn down.

Order matters and is the contract users see:
  1. every pre-check (mur.session.prechecks -> a CheckedRun) — nothing exists on disk yet;
  2. the A2A door binds (E-RUN-010 when network.internal_port is taken) — still nothing on disk;
  3. the workdir is created and staged, the shell sandbox starts (cgroups, size watcher);
  4. the reporter gets the startup facts (the CLI prints the line, or one JSON line with --json:
     deploy's contract);
  5. the lifecycle runs tasks until it ends; SIGTERM finishes or fails the running task;
  6. teardown always runs: sandbox processes killed and cgroups removed, trace closed, server stopped;
  7. the reporter gets the ending (status, the last task's answer, the error), then a session that
     did not end ok raises its MurError.

Every step that acquires something registers its undo beside it, on the session's one ExitStack;
teardown is closing that stack (in reverse order, each undo once, the rest still run when one fails).

Ctrl-C (SIGINT) at any point: mur.wasm.interrupt holds it back while guest code runs, the task ends
`interrupted` (session_end and task_end say so), teardown runs without being cut short, the
reporter hears status `interrupted`, and KeyboardInterrupt goes on up (the CLI exits 130). Before
the startup line (compiling, staging) the half-made session directory is removed.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Callable

from mur import ids
from mur.errors import MurError, warn
from mur.session.options import RunOptions
from mur.session.reporter import Ending, SessionReporter, SilentReporter

if TYPE_CHECKING:
    from mur.a2a.auth import DoorAuth
    from mur.a2a.lifecycle import TaskContext, TaskOutcome, TaskRequest
    from mur.hooks.hookset import HookSet
    from mur.otel.exporter import OtelExporter
    from mur.sandbox.guestdisk import SessionDisk
    from mur.sandbox.shell import ShellSandbox
    from mur.session.executor import TaskExecutor
    from mur.session.prechecks import CheckedRun
    from mur.session.staging import Staged
    from mur.session.tools import SessionTools
    from mur.session.workdir import Workdir
    from mur.trace.writer import TraceWriter


def run_session(opts: RunOptions, reporter: SessionReporter | None = None) -> None:
    """Run a capsule session, reporting its startup and ending to `reporter`; raises MurError for the
    CLI to render (exit 1) when it did not end ok, KeyboardInterrupt when Ctrl-C ended it."""
    from mur.wasm.interrupt import deferred_sigint

    with deferred_sigint():
        session = Session.check(opts, reporter or SilentReporter())
        with session:
            session.bind()
            session.stage()
            session.start_tools()
            session.serve()
        session.finish()


class Session:
    """One capsule session of `mur run`: its stages as methods, its resources on one ExitStack.

    Public seams: the A2A door calls :meth:`run_task` for each task and :meth:`record` /
    :meth:`flush_trace` for its trace events; hooks are built from :attr:`tools`, :attr:`trace` and
    :attr:`wd` (mur.session.hookwiring). The attributes below exist from the stage that makes them."""

    url: str  # bind(): the capsule URL (MURMUR_CAPSULE_URL)
    trace: TraceWriter  # stage()
    staged: Staged  # stage()
    initial: str | None  # stage(): the task given on the command line (task.md), if any
    shell: ShellSandbox | None  # start_tools(): None when the capsule cannot spawn subprocesses
    live: Workdir  # start_tools(): `wd` as the runtime reaches it while the session runs (on the session
    #                disk, through the namespace holding it); `wd` itself has the tools' files after teardown
    tools: SessionTools  # start_tools()
    hooks: HookSet | None  # start_tools(): None without hook artifacts
    tasks: TaskExecutor  # start_tools()
    status: str  # serve(): what the lifecycle says ("ok" or "failed")

    def __init__(self, checked: CheckedRun, reporter: SessionReporter, auth: DoorAuth | None = None):
        from mur.a2a.lifecycle import CapsuleService, lifecycle_with_overrides
        from mur.session.workdir import plan_workdir
        from mur.wasm.interrupt import raise_soon

        opts = checked.options
        capsule = checked.capsule
        self.checked = checked
        self.reporter = reporter
        self.id = ids.session_id()
        self.wd: Workdir = plan_workdir(checked.loaded.dir, self.id, opts.workdir)
        # The agent card the door serves: its capabilities are filled in once the tools are staged.
        self.card: dict[str, Any] = {"name": capsule.name, "version": capsule.version, "capabilities": {}}
        self.door = CapsuleService(
            card=self.card,
            lifecycle=lifecycle_with_overrides(capsule.lifecycle, opts.task_acceptance, opts.after_task),
            executor=self.run_task,
            trace=self.record,
            trace_flush=self.flush_trace,
            workdir=self.wd.session,
            task_dir=self.wd.accessible,
            bind=opts.bind,
            port=opts.port if opts.port is not None else capsule.network.internal_port,
            # the agent loop and the claude CLI stop between steps on tasks/cancel; a plain capsule's
            # run() cannot be stopped midway, so its running task is not cancelable
            cancel_running=capsule.inference is not None,
            auth=auth,
            on_wait=lambda timeout: reporter.waiting(self.url, timeout),
            on_idle=self._let_go,
            raise_into=raise_soon,  # SIGTERM's Terminated never lands inside wasmtime's glue
        )
        self.serving = False  # the startup line went out
        self.interrupted = False  # a Ctrl-C ended the linger after the last task
        self.launch_warnings: list[tuple[str, str]] = []  # the shell sandbox's W-SEC-* for this host
        self._stack = ExitStack()
        self.tools: Any = None  # mur.session.tools.SessionTools, once started

    # --- the stages ------------------------------------------------------------------------------

    @classmethod
    def check(cls, opts: RunOptions, reporter: SessionReporter) -> Session:
        """Every pre-check and the door's credentials; raises MurError before anything exists."""
        from mur.a2a.auth import load_door_auth
        from mur.session.prechecks import prepare

        checked = prepare(opts)
        return cls(checked, reporter, load_door_auth(opts.a2a_token_file, opts.tls_cert, opts.tls_key))

    def bind(self) -> str:
        """The A2A door binds and serves (E-RUN-010 when the port is taken); returns the capsule URL."""
        self.url = self.door.start()
        self._stack.callback(self.door.stop)
        return self.url

    def stage(self) -> None:
        """The session directory, the task, the trace (and its OTel export), the staged tools."""
        from mur.session import facts
        from mur.session.staging import stage
        from mur.session.workdir import create_workdir, write_task_input
        from mur.trace.writer import TraceWriter

        checked, wd = self.checked, self.wd
        checked.loaded.emit_stage_warnings()
        _native_grant_warnings(checked)
        create_workdir(wd)
        self._stack.push(self._discard_unserved)
        self.initial = write_task_input(wd, checked.options.task)  # before any tool can touch the workdir
        otel = _otel_exporter(checked, wd)
        if otel is not None:
            self._stack.callback(otel.export)  # never raises; bounded by its timeout; failures go to logs/otel.log
        self.trace = TraceWriter(wd.trace, self.id, wd.bootstrap_log)
        self._stack.callback(self.trace.close)
        self._stack.callback(self.door.stop)  # again: the door closes before the trace, not after the export
        if otel is not None:
            self.trace.listeners.append(otel.on_event)
        self.staged = stage(checked.resolved.artifacts, checked.capsule.capabilities.shell_allow, wd)
        self._stack.callback(self.staged.cleanup)
        self.card.update(facts.card(checked, self.staged))

    def start_tools(self, **hook_options: Any) -> None:
        """The shell sandbox, the guests' host with every component compiled, the hooks, the task
        executor, MURMUR.md; then the startup line. `hook_options`: build_hooks' model_client and
        tuning knobs (mur.session.hookwiring)."""
        from mur.session import facts, murmur_md
        from mur.session.executor import TaskExecutor
        from mur.session.hookwiring import session_hooks
        from mur.session.tools import SessionTools

        checked, wd, staged = self.checked, self.wd, self.staged
        self.shell = self._start_shell()
        disk = self._open_disk() if self.shell is None else None
        # From here the runtime reaches the tools' workdir where they see it: on the session disk
        # (mur.sandbox.disk), through the namespace holding it; the host directory gets it back at the end.
        self.live = wd = _live(wd, self.shell or disk)
        self.door.task_dir = wd.accessible
        tools = SessionTools(staged, facts.guest_settings(checked, self.id, self.url, wd), self.shell, self.trace)
        tools.disk = disk
        self._stack.callback(tools.close)
        engine = tools.host.engine
        engine.progress = lambda what: self.reporter.activity(f"compiling {what}")
        self._stack.callback(setattr, engine, "progress", None)
        engine.prepare(facts.components(checked, staged))  # no first-call stall; missing ones compile in parallel
        self.tools = tools
        self.hooks = session_hooks(self, **hook_options)
        if self.hooks is not None:
            self._stack.callback(self.hooks.close)  # drains async hooks while the trace is still open
            self.hooks.on_stage(checked.capsule.capabilities.shell_allow)
            self.trace.listeners.append(self.hooks.on_event)
        self.tasks = TaskExecutor(checked, self.id, wd, tools, self.trace, self.url, hooks=self.hooks,
                                  reporter=self.reporter, process_cwd=self.wd.accessible)
        if checked.prompts.bound_skill is not None:
            tools.hidden.add(checked.prompts.bound_skill)  # the prompt itself: not separately callable
        murmur_md.write(wd, facts.inventory(checked, self.id, self.url, tools, self.hooks))
        _launch_warnings(self.launch_warnings, wd)
        self.reporter.started(facts.startup(checked, self.url, self.id, self.wd, staged))
        self.serving = True

    def _let_go(self) -> None:
        """Idle for a while: the components go back to the cache until the next task."""
        if self.tools is not None:
            self.tools.host.engine.let_go()

    def serve(self) -> str:
        """Run the lifecycle to its end (mur.a2a.lifecycle); returns its status."""
        try:
            self.status = self.door.run(self.initial)
        except KeyboardInterrupt:  # during the linger after the last task
            self.status, self.interrupted = "failed", True
        return self.status

    def teardown(self, exc: BaseException | None = None) -> None:
        """Every undo on the stack, in reverse order, with a second Ctrl-C held back (it must not leave
        sandboxed processes or cgroups behind); `exc`: what ended the session early, if anything."""
        from mur.wasm.interrupt import held

        with held():
            self._stack.__exit__(type(exc) if exc is not None else None, exc, exc.__traceback__ if exc else None)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None) -> None:
        self.teardown(exc)

    def ending(self) -> Ending:
        """How the session ended, once it is torn down: its status, the last task's answer, the error."""
        from mur.a2a.tasks import COMPLETED

        door, tasks = self.door, self.tasks
        # A queue + sleep service ends ok (idle, SIGTERM) whatever one task did; its tasks say how they ended.
        final = self.status if door.keeps_serving else tasks.status
        if final == "ok" and self.status != "ok":
            final = "failed"
        if self.interrupted or door.interrupted:
            final = "interrupted"
        error = None if final in ("ok", "interrupted") else (
            tasks.last_error or MurError("E-RUN-007", "agent loop failed: the session did not complete"))
        task = door.last_task
        result = task.response if task is not None and task.state == COMPLETED else None
        path = self.wd.result if task is not None and self.wd.result.is_file() else None
        return Ending(status=final, session_id=self.id, result=result, result_path=path, error=error)

    def finish(self) -> None:
        """Report the ending; raise what a session that did not end ok ends with."""
        ending = self.ending()
        self.reporter.ended(ending)
        if ending.status == "interrupted":
            raise KeyboardInterrupt
        if ending.error is not None:
            raise ending.error

    # --- the door's seams ------------------------------------------------------------------------

    def run_task(self, request: TaskRequest, context: TaskContext) -> TaskOutcome:
        """One task, run by the session's executor (the door calls this once the tools are started)."""
        return self.tasks(request, context)

    def record(self, event: dict) -> None:
        """One trace event from the door (only while it serves, so the trace is open)."""
        self.trace.write(event)

    def flush_trace(self) -> None:
        self.trace.flush()

    # --- helpers ---------------------------------------------------------------------------------

    def _start_shell(self) -> ShellSandbox | None:
        """Start the shell sandbox when the capsule can spawn subprocesses (E-RUN-012 inside); native
        tools run in it like shell.allow binaries (mur.session.native)."""
        checked, wd = self.checked, self.wd
        if not checked.subprocesses:
            return None
        from mur.sandbox.shell import ShellSandbox
        from mur.session import native

        caps = checked.capsule.capabilities
        natives = [t.name for t in self.staged.tools.values() if t.kind == "native" and t.exec_path is not None]
        shell = ShellSandbox(
            native.SandboxCaps(caps, natives) if natives else caps, wd.accessible, self.id,
            checked.loaded.network_allow, probe=checked.probe, log=_bootstrap_logger(wd), logs_dir=wd.logs,
            host_env=native.sandbox_env(wd.session, dict(os.environ)) if natives else None,
            state_dir=wd.session, require_sealed=checked.floor.declared == "sealed",
        )
        self.launch_warnings = shell.start()
        self._stack.callback(shell.close)  # the tools' files come back from the session disk here
        return shell

    def _open_disk(self) -> SessionDisk:
        """The workdir ceiling of a capsule without subprocesses (its guests write the workdir)."""
        from mur.sandbox.guestdisk import SessionDisk

        checked, wd = self.checked, self.wd
        disk = SessionDisk(checked.capsule.capabilities, wd.accessible, checked.probe, state_dir=wd.session,
                           log=_bootstrap_logger(wd)).open()
        self._stack.callback(disk.close)
        return disk

    def _discard_unserved(self, kind: type[BaseException] | None, _exc: BaseException | None, _tb: Any) -> bool:
        """The undo of creating the session directory: a Ctrl-C before the startup line (compiling,
        staging) leaves nothing of this session behind; anything else keeps its logs."""
        if kind is not None and issubclass(kind, KeyboardInterrupt) and not self.serving:
            _remove_session_dir(self.wd)
        return False


def _live(wd: Workdir, storage: ShellSandbox | SessionDisk | None) -> Workdir:
    """``wd`` with the tools' workdir as the runtime reaches it during the session."""
    from dataclasses import replace

    return replace(wd, accessible=storage.live_workdir) if storage is not None else wd


def _launch_warnings(warnings: list[tuple[str, str]], wd: Workdir) -> None:
    """W-SEC-001/002/005/010 go to stderr and to logs/bootstrap.log (upstream's rule)."""
    if not warnings:
        return
    for code, message in warnings:
        warn(code, message)
    _bootstrap_logger(wd)("".join(f"warning[{code}]: {message}\n" for code, message in warnings))


def _remove_session_dir(wd: Workdir) -> None:
    """Remove a session directory that never served (never through a link); best effort."""
    from mur.fsafe import Tree

    try:
        with Tree(wd.session.parent) as parent:
            parent.remove_tree(wd.session.name)
    except OSError:
        pass


def _native_grant_warnings(checked: CheckedRun) -> None:
    """W-SEC-008 for a grant on a native tool: only known once the artifact's own manifest is resolved."""
    from mur.manifest.grants import native_grant_warning

    for res in checked.resolved.artifacts.values():
        grant = checked.loaded.grants.get(res.name)
        if res.is_native and grant is not None:
            found = native_grant_warning(grant)
            if found is not None:
                warn(*found)


def _otel_exporter(checked: CheckedRun, wd: Workdir) -> OtelExporter | None:
    """The OTel span exporter when observability.otel_endpoint is set (spec: "OTel span emission")."""
    capsule = checked.capsule
    endpoint = capsule.observability.otel_endpoint
    if not endpoint:
        return None
    from mur.otel.exporter import OtelExporter

    return OtelExporter(
        endpoint, service_name=capsule.name, service_version=capsule.version, log_path=wd.logs / "otel.log", timeout=5.0
    )


def _bootstrap_logger(wd: Workdir) -> Callable[[str], None]:
    from mur.fsafe import append_text

    def log(message: str) -> None:
        try:
            append_text(wd.bootstrap_log, message.rstrip("\n") + "\n")
        except OSError:
            pass

    return log
