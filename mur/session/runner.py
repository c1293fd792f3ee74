"""`mur run` end to end: pre-checks, session, staging, sandbox, A2A service, tasks, teardown.

Order matters and is the contract users see:
  1. every pre-check (mur.session.prechecks) — nothing exists on disk yet;
  2. the A2A server binds (E-RUN-010 when network.internal_port is taken) — still nothing on disk;
  3. the workdir is created and staged, the shell sandbox starts (cgroups, size watcher);
  4. the reporter gets the startup facts (the CLI prints the line, or one JSON line with --json:
     deploy's contract);
  5. the lifecycle runs tasks until it ends; SIGTERM finishes or fails the running task;
  6. teardown always runs: sandbox processes killed and cgroups removed, trace closed, server stopped;
  7. the reporter gets the ending (status, the last task's answer, the error), then a session that
     did not end ok raises its MurError.

Ctrl-C (SIGINT) at any point: mur.wasm.interrupt holds it back while guest code runs, the task ends
`interrupted` (session_end and task_end say so), teardown runs without being cut short, the
reporter hears status `interrupted`, and KeyboardInterrupt goes on up (the CLI exits 130). Before
the startup line (compiling, staging) the half-made session directory is removed.
"""

from __future__ import annotations

import os
from typing import Any

from mur import ids
from mur.errors import MurError, warn
from mur.session.options import RunOptions
from mur.session.reporter import Ending, SessionReporter, SilentReporter, Startup


def _card(prep: Any, staged: Any) -> dict[str, Any]:
    capsule = prep.loaded.capsule
    return {
        "name": capsule.name,
        "version": capsule.version,
        "capabilities": {
            "tools": [t.name for t in staged.by_role("tool")],
            "shell": bool(capsule.capabilities.shell_allow),
            "network": bool(capsule.capabilities.network.allow),
            "streaming": True,
        },
    }


def _startup(prep: Any, url: str, session_id: str, wd: Any, staged: Any) -> Startup:
    capsule = prep.loaded.capsule
    inf = capsule.inference
    driver = inf.driver_artifact if inf and inf.transport == "http" else (inf.effective_command if inf else None)
    return Startup(url=url, pid=os.getpid(), session_id=session_id, name=capsule.name, version=capsule.version,
                   workdir=wd.session, tools_workdir=wd.accessible, driver=driver,
                   skills=len(staged.by_role("skill")))


def _launch_warnings(warnings: list[tuple[str, str]], wd: Any) -> None:
    """W-SEC-001/002/005/010 go to stderr and to logs/bootstrap.log (upstream's rule)."""
    if not warnings:
        return
    for code, message in warnings:
        warn(code, message)
    _bootstrap_logger(wd)("".join(f"warning[{code}]: {message}\n" for code, message in warnings))


def run_session(opts: RunOptions, reporter: SessionReporter | None = None) -> None:
    """Run a capsule session, reporting its startup and ending to `reporter`; raises MurError for the
    CLI to render (exit 1) when it did not end ok, KeyboardInterrupt when Ctrl-C ended it."""
    from mur.wasm.interrupt import deferred_sigint

    with deferred_sigint():
        _run_session(opts, reporter or SilentReporter())


def _run_session(opts: RunOptions, reporter: SessionReporter) -> None:
    from mur.a2a.lifecycle import CapsuleService, lifecycle_with_overrides
    from mur.a2a.auth import load_door_auth
    from mur.session import murmur_md
    from mur.session.prechecks import prepare
    from mur.session.staging import stage
    from mur.session.tools import SessionTools
    from mur.trace.writer import TraceWriter
    from mur.session.workdir import create_workdir, plan_workdir, write_task_input
    from mur.wasm.interrupt import held, raise_soon

    prep = prepare(opts)
    door_auth = load_door_auth(opts.a2a_token_file, opts.tls_cert, opts.tls_key)
    loaded = prep.loaded
    capsule = loaded.capsule
    session_id = ids.session_id()
    wd = plan_workdir(loaded.dir, session_id, opts.workdir)
    lifecycle = lifecycle_with_overrides(capsule.lifecycle, opts.task_acceptance, opts.after_task)
    port = opts.port if opts.port is not None else capsule.network.internal_port

    executor_box: dict[str, Any] = {}
    trace_box: dict[str, Any] = {}

    def execute(request: Any, context: Any) -> Any:
        return executor_box["executor"](request, context)

    def trace_event(event: dict) -> None:
        writer = trace_box.get("writer")
        if writer is not None:
            writer.write(event)

    def trace_flush() -> None:
        writer = trace_box.get("writer")
        if writer is not None:
            writer.flush()

    card_box: dict[str, Any] = {"name": capsule.name, "version": capsule.version, "capabilities": {}}
    service = CapsuleService(
        card=card_box,
        lifecycle=lifecycle,
        executor=execute,
        trace=trace_event,
        trace_flush=trace_flush,
        workdir=wd.session,
        task_dir=wd.accessible,
        bind=opts.bind,
        port=port,
        # the agent loop and the claude CLI stop between steps on tasks/cancel; a plain capsule's
        # run() cannot be stopped midway, so its running task is not cancelable
        cancel_running=capsule.inference is not None,
        auth=door_auth,
        on_wait=lambda timeout: reporter.waiting(url, timeout),
        raise_into=raise_soon,  # SIGTERM's Terminated never lands inside wasmtime's glue
    )
    staged = shell = disk = trace = otel = hooks = tools = engine = None
    serving = interrupted = discard = False
    url = service.start()
    try:
        loaded.emit_stage_warnings()
        _native_grant_warnings(prep)
        create_workdir(wd)
        initial = write_task_input(wd, opts.task)  # before any tool can touch the workdir
        trace = TraceWriter(wd.trace, session_id, wd.bootstrap_log)
        trace_box["writer"] = trace
        otel = _otel_exporter(capsule, wd)
        if otel is not None:
            trace.listeners.append(otel.on_event)
        staged = stage(prep.resolved, capsule.capabilities.shell_allow, wd)
        card_box.update(_card(prep, staged))
        shell = _start_shell(prep, wd, session_id, loaded)
        disk = _open_disk(prep, wd) if shell is None else None
        # From here the runtime reaches the tools' workdir where they see it: on the session disk
        # (mur.sandbox.disk), through the namespace holding it; the host directory gets it back at the end.
        wd_host, wd = wd, _live(wd, shell or disk)
        service.task_dir = wd.accessible
        settings = _guest_settings(prep, session_id, url, wd, staged)
        from mur.wasm.host import WasmHost

        tools = SessionTools(staged, settings, None, shell, trace)
        tools.disk = disk
        tools.host = WasmHost(shell=tools.guest_shell)
        engine = tools.host.engine
        engine.progress = lambda what: reporter.activity(f"compiling {what}")
        _precompile(tools, staged, prep)
        from mur.session.hookwiring import session_hooks

        hooks = session_hooks(tools, trace, loaded, wd)  # None without hook artifacts
        if hooks is not None:
            hooks.on_stage(capsule.capabilities.shell_allow)
            trace.listeners.append(hooks.on_event)
        from mur.session.executor import TaskExecutor

        executor = TaskExecutor(prep, session_id, wd, tools, trace, url, hooks=hooks, reporter=reporter)
        executor_box["executor"] = executor
        inventory = murmur_md.Inventory(
            capsule.name,
            capsule.version,
            session_id,
            url,
            capsule.inference.model if capsule.inference else None,
            capsule.context.max_tokens,
            capsule.inference is not None and capsule.inference.compaction is not None,
            tools=[murmur_md.ToolEntry(t.name, t.version, t.kind, t.description) for t in tools.visible() if t.role != "skill"],
            skills=[murmur_md.ToolEntry(t.name, t.version, t.kind) for t in staged.by_role("skill")],
        )
        murmur_md.write(wd, inventory)
        if shell is not None:
            _launch_warnings(shell.launch_warnings, wd)
        reporter.started(_startup(prep, url, session_id, wd_host, staged))
        serving = True
        try:
            status = service.run(initial)
        except KeyboardInterrupt:  # during the linger after the last task
            status, interrupted = "failed", True
    except KeyboardInterrupt:
        discard = not serving  # compiling or staging: nothing ran, so nothing of this session is kept
        raise
    finally:
        with held():  # a second Ctrl-C must not leave sandboxed processes or cgroups behind
            _teardown(hooks, shell, disk, staged, tools, engine, service, trace, otel)
            if discard:
                _remove_session_dir(wd)
    executor = executor_box.get("executor")
    # A queue + sleep service ends ok (idle, SIGTERM) whatever one task did; its tasks say how they ended.
    final = status if service.keeps_serving else executor.status if executor is not None else "failed"
    if final == "ok" and status != "ok":
        final = "failed"
    if interrupted or service.interrupted:
        final = "interrupted"
    error = None if final in ("ok", "interrupted") else (
        (executor.last_error if executor is not None else None)
        or MurError("E-RUN-007", "agent loop failed: the session did not complete"))
    reporter.ended(_ending(final, session_id, service.last_task, wd, error))
    if final == "interrupted":
        raise KeyboardInterrupt
    if error is not None:
        raise error


def _teardown(hooks: Any, shell: Any, disk: Any, staged: Any, tools: Any, engine: Any, service: Any, trace: Any,
              otel: Any) -> None:
    """Undo what the session set up, in order; idempotent (each part closes once)."""
    if hooks is not None:
        hooks.close()  # drains async hooks while the trace is still open
    if shell is not None:
        shell.close()  # the tools' files come back from the session disk here
    if disk is not None:
        disk.close()
    if staged is not None:
        staged.cleanup()
    if tools is not None:
        tools.close()
    if engine is not None:
        engine.progress = None
    service.stop()
    if trace is not None:
        trace.close()
    if otel is not None:
        otel.export()  # never raises; bounded by its timeout; failures go to logs/otel.log


def _ending(status: str, session_id: str, task: Any, wd: Any, error: Any) -> Ending:
    """The Ending of a session whose last task was `task` (None: no task ran)."""
    from mur.a2a.tasks import COMPLETED

    result = task.response if task is not None and task.state == COMPLETED else None
    path = wd.result if task is not None and wd.result.is_file() else None
    return Ending(status=status, session_id=session_id, result=result, result_path=path, error=error)


def _remove_session_dir(wd: Any) -> None:
    """Remove a session directory that never served (never through a link); best effort."""
    from mur.fsafe import Tree

    try:
        with Tree(wd.session.parent) as parent:
            parent.remove_tree(wd.session.name)
    except OSError:
        pass


def _native_grant_warnings(prep: Any) -> None:
    """W-SEC-008 for a grant on a native tool: only known once the artifact's own manifest is resolved."""
    from mur.manifest.grants import native_grant_warning

    for res in prep.resolved.values():
        grant = prep.loaded.grants.get(res.name)
        if res.is_native and grant is not None:
            found = native_grant_warning(grant)
            if found is not None:
                warn(*found)


def _otel_exporter(capsule: Any, wd: Any) -> Any:
    """The OTel span exporter when observability.otel_endpoint is set (spec: "OTel span emission")."""
    endpoint = capsule.observability.otel_endpoint
    if not endpoint:
        return None
    from mur.otel.exporter import OtelExporter

    return OtelExporter(
        endpoint, service_name=capsule.name, service_version=capsule.version, log_path=wd.logs / "otel.log", timeout=5.0
    )


def _start_shell(prep: Any, wd: Any, session_id: str, loaded: Any) -> Any:
    """Start the shell sandbox when the capsule can spawn subprocesses (E-RUN-012 inside)."""
    from mur.session.launch_checks import needs_subprocesses

    if not needs_subprocesses(prep):
        return None
    from mur.sandbox.shell import ShellSandbox

    shell = ShellSandbox(
        prep.loaded.capsule.capabilities, wd.accessible, session_id, loaded.network_allow, probe=prep.probe,
        log=_bootstrap_logger(wd), logs_dir=wd.logs, state_dir=wd.session,
        require_sealed=prep.floor.declared == "sealed",
    )
    shell.launch_warnings = shell.start()
    return shell


def _open_disk(prep: Any, wd: Any) -> Any:
    """The workdir ceiling of a capsule without subprocesses (its guests write the workdir)."""
    from mur.sandbox.guestdisk import SessionDisk

    return SessionDisk(prep.loaded.capsule.capabilities, wd.accessible, prep.probe, state_dir=wd.session,
                       log=_bootstrap_logger(wd)).open()


def _live(wd: Any, storage: Any) -> Any:
    """``wd`` with the tools' workdir as the runtime reaches it during the session."""
    from dataclasses import replace

    return replace(wd, accessible=storage.live_workdir) if storage is not None else wd


def _bootstrap_logger(wd: Any):
    from mur.fsafe import append_text

    def log(message: str) -> None:
        try:
            append_text(wd.bootstrap_log, message.rstrip("\n") + "\n")
        except OSError:
            pass

    return log


def _guest_settings(prep: Any, session_id: str, url: str, wd: Any, staged: Any) -> Any:
    from mur.inference.driver import driver_env
    from mur.session.tools import GuestSettings

    capsule = prep.loaded.capsule
    caps = capsule.capabilities
    murmur_vars = {
        "MURMUR_SESSION_ID": session_id,
        "MURMUR_CAPSULE_URL": url,
        "MURMUR_CAPSULE_NAME": capsule.name,
        "MURMUR_CAPSULE_VERSION": capsule.version,
    }
    if capsule.observability.otel_endpoint:
        murmur_vars["MURMUR_OTEL_ENDPOINT"] = capsule.observability.otel_endpoint
    extra: dict[str, dict[str, str]] = {}
    inf = capsule.inference
    if inf is not None and inf.transport == "http" and inf.driver_artifact:
        extra[inf.driver_artifact] = driver_env(inf, prep.loaded.api_key)
    return GuestSettings(
        env_allow=list(caps.env.allow),
        strip_env=list(caps.shell.strip_env) if caps.shell else [],
        murmur_vars=murmur_vars,
        limits=caps.limits,
        ceiling=prep.loaded.network_allow,
        accessible=wd.accessible,
        capsule_scope=caps.filesystem.scope,
        grants=prep.loaded.grants,
        logs_dir=wd.logs,
        include_output=capsule.trace.include_tool_output,
        extra_vars=extra,
    )


def _precompile(tools: Any, staged: Any, prep: Any) -> None:
    """Compile (or load from the cache) every component before the startup line: no first-call stall;
    the missing ones compile in parallel (mur.wasm.compile)."""
    wanted = [(tool.wasm_path, "driver" if tool.role == "driver" else "tool", tool.name)
              for tool in staged.tools.values() if tool.kind == "wasm" and tool.wasm_path is not None]
    if prep.capsule_wasm is not None:
        wanted.append((prep.capsule_wasm, "capsule", prep.loaded.capsule.name))
    tools.host.engine.prepare(wanted)
