"""Runs a capsule session in-process the way mur/session/runner.py composes it (session_hooks after
staging, the trace listener, on-stage, the executor running the loop with the hooks' decisions,
close() before the trace closes), with what `mur run` cannot inject: a model client for the hooks'
run-inference and build_hooks' tuning knobs (queue depth, drain budget, HTTP transport). The real
`mur run` path is tested in test_hooks_mur_run.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur import ids
from mur.errors import MurError
from mur.trace.reader import load_events


@dataclass
class SessionResult:
    session: Path
    accessible: Path
    status: str
    error: MurError | None
    hooks: Any
    trace: list[dict] = field(default_factory=list)

    def events(self, kind: str) -> list[dict]:
        return [e for e in self.trace if e["event_type"] == kind]

    def hook_log(self, name: str) -> str:
        path = self.session / "logs" / f"hook-{name}.log"
        return path.read_text() if path.is_file() else ""

    def probe_lines(self, name: str) -> list[dict]:
        import json

        out = []
        for line in self.hook_log(name).splitlines():
            if line.startswith('{"probe"'):
                out.append(json.loads(line))
        return out


def run_session(manifest: Path, task: str | None, *, workdir: Path | None = None, model_client: Any = None,
                hook_kwargs: dict | None = None) -> SessionResult:
    from mur.a2a.lifecycle import CapsuleService, lifecycle_with_overrides
    from mur.session.executor import TaskExecutor
    from mur.session.hookwiring import session_hooks
    from mur.session.options import RunOptions
    from mur.session.prechecks import prepare
    from mur.session.runner import _guest_settings, _precompile
    from mur.session.staging import stage
    from mur.session.tools import SessionTools
    from mur.trace.writer import TraceWriter
    from mur.session.workdir import create_workdir, plan_workdir, write_task_input
    from mur.wasm.host import WasmHost

    opts = RunOptions(manifest=Path(manifest), task=task, workdir=workdir, no_env_file=True)
    prep = prepare(opts)
    loaded = prep.loaded
    capsule = loaded.capsule
    session_id = ids.session_id()
    wd = plan_workdir(loaded.dir, session_id, opts.workdir)
    box: dict[str, Any] = {}

    def trace_event(event: dict) -> None:
        if "trace" in box:
            box["trace"].write(event)

    service = CapsuleService(card={"name": capsule.name}, lifecycle=lifecycle_with_overrides(capsule.lifecycle),
                             executor=lambda r, c: box["executor"](r, c), trace=trace_event, workdir=wd.session,
                             task_dir=wd.accessible, idle_timeout=1)
    url = service.start()
    staged = trace = hooks = None
    status = "failed"
    try:
        create_workdir(wd)
        trace = TraceWriter(wd.trace, session_id, wd.bootstrap_log)
        box["trace"] = trace
        staged = stage(prep.resolved, capsule.capabilities.shell_allow, wd)
        settings = _guest_settings(prep, session_id, url, wd, staged)
        tools = SessionTools(staged, settings, None, None, trace)
        tools.host = WasmHost(shell=tools.guest_shell)
        _precompile(tools, staged, prep)
        hooks = session_hooks(tools, trace, loaded, wd, model_client=model_client, **(hook_kwargs or {}))
        if hooks is not None:
            hooks.on_stage(capsule.capabilities.shell_allow)
            trace.listeners.append(hooks.on_event)
        box["executor"] = TaskExecutor(prep, session_id, wd, tools, trace, url, hooks=hooks)
        initial = write_task_input(wd, task)
        status = service.run(initial)
    finally:
        if hooks is not None:
            hooks.close()
        if staged is not None:
            staged.cleanup()
        service.stop()
        if trace is not None:
            trace.close()
    executor = box.get("executor")
    final = executor.status if executor is not None else "failed"
    if final == "ok" and status != "ok":
        final = "failed"
    events = load_events(wd.trace) if wd.trace.is_file() else []
    return SessionResult(wd.session, wd.accessible, final, executor.last_error if executor else None, hooks, events)
