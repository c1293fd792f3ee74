"""One task, one attempt: `session_start`, the capsule's work, `session_end` (upstream section 3.3).

The A2A service (mur.a2a.lifecycle) calls `TaskExecutor` for every task it accepts. A capsule with an
`inference:` block runs the agent loop (transport http through the driver component, or the claude
CLI as a process); a plain capsule runs its own `capsule.wasm`, whose tools are reached through
`murmur:tool-registry/invoke`. Failures become a failed TaskOutcome (the session keeps serving); the
last one is kept so `mur run` can report it (status `failed` or `trapped`).
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mur.errors import MurError
from mur.fsafe import LinkRefused, Tree
from mur.trace import events as ev

if TYPE_CHECKING:
    from mur.a2a.lifecycle import TaskContext, TaskOutcome, TaskRequest
    from mur.hooks.hookset import HookSet
    from mur.inference.continuation import Continuation
    from mur.session.prechecks import CheckedRun
    from mur.session.reporter import SessionReporter
    from mur.session.tools import SessionTools
    from mur.session.workdir import Workdir
    from mur.trace.writer import TraceWriter


class TaskExecutor:
    """Runs tasks for one session."""

    def __init__(
        self, checked: CheckedRun, session_id: str, wd: Workdir, tools: SessionTools, trace: TraceWriter,
        capsule_url: str, hooks: HookSet | None = None, reporter: SessionReporter | None = None,
        process_cwd: Path | None = None,
    ):
        self.checked = checked
        # where the claude CLI (transport: process) starts: it runs on the host, outside a session
        # root, so it takes the host's workdir (a /proc/<pid>/root path is no cwd it can keep); it runs
        # with no tools of its own (--tools ""), so it never reads or writes the tools' tree
        self.process_cwd = process_cwd or wd.accessible
        self.hooks = hooks
        self.reporter = reporter  # a SessionReporter: provider retries show on a terminal
        self.session_id = session_id
        self.wd = wd
        self.tools = tools
        self.trace = trace
        self.capsule_url = capsule_url
        self.last_error: MurError | None = None
        self.status = "ok"  # ok | failed | trapped | max_turns_reached | interrupted
        self.totals = {"turns": 0, "input_tokens": 0, "output_tokens": 0, "tool_calls": 0, "shell_calls": 0}
        self._continuation: Continuation | None = None

    @property
    def continuation(self) -> Continuation:
        """A driver's continuation_id, kept between turns and tasks (made on first use: a plain
        capsule never loads the inference package)."""
        if self._continuation is None:
            from mur.inference.continuation import Continuation

            self._continuation = Continuation()
        return self._continuation

    # --- trace ---------------------------------------------------------------------------------

    def _session_start(self, max_turns: int) -> None:
        from mur.sandbox.scope import effective_grants

        checked = self.checked
        capsule = checked.capsule
        caps = capsule.capabilities
        declared_caps = []
        if caps.network.allow:
            declared_caps.append("network")
        if caps.filesystem.scope:
            declared_caps.append("filesystem")
        if caps.shell_allow:
            declared_caps.append("shell")
        prompts = checked.prompts
        prompt = prompts.system
        grants = effective_grants(capsule, checked.floor, checked.probe, applied=getattr(self.tools.shell, "policy", None),
                                  guest_disk=getattr(getattr(self.tools, "disk", None), "plan", None))
        self.trace.emit(
            ev.SESSION_START,
            capsule_name=capsule.name,
            capsule_version=capsule.version,
            model=capsule.inference.model if capsule.inference else None,
            max_turns=max_turns,
            capabilities=declared_caps,
            tools_declared=[t.name for t in self.tools.visible()],
            containment_declared=checked.floor.declared,
            containment_achieved=grants["achieved_containment"],  # what the session got, not the intent
            workdir_exec=caps.filesystem.workdir_exec,
            system_prompt_source=prompts.source,
            system_prompt_sha256=hashlib.sha256(prompt.encode()).hexdigest() if prompt is not None else None,
            **({"system_prompt": prompt} if capsule.trace.include_tool_output and prompt is not None else {}),
            effective_grants=grants,
        )

    def _session_end(self, stats: dict[str, int], exit_status: str, started: float) -> None:
        for key in self.totals:
            self.totals[key] += stats.get(key, 0)
        self.trace.emit(
            ev.SESSION_END,
            total_turns=self.totals["turns"],
            total_input_tokens=self.totals["input_tokens"],
            total_output_tokens=self.totals["output_tokens"],
            total_tool_calls=self.totals["tool_calls"],
            total_shell_calls=self.totals["shell_calls"],
            duration_ms=int((time.monotonic() - started) * 1000),
            exit_status=exit_status,
        )

    # --- the executor ----------------------------------------------------------------------------

    def __call__(self, request: TaskRequest, context: TaskContext) -> TaskOutcome:
        from mur.a2a.lifecycle import TaskOutcome

        capsule = self.checked.capsule
        max_turns = capsule.inference.max_turns if capsule.inference else 0
        started = time.monotonic()
        calls_before = (self.tools.tool_calls, self.tools.shell_calls)
        status_before, error_before = self.status, self.last_error
        self._session_start(max_turns)
        try:
            if capsule.inference is None:
                state, text, stats, history = self._run_plain(request, context)
            else:
                state, text, stats, history = self._run_agent(request, context)
        except MurError as err:
            self.last_error = err
            self.status = "trapped" if err.code == "E-RUN-001" else "failed"
            state, text, stats, history = "failed", err.message, {}, None
        except KeyboardInterrupt:  # Ctrl-C: the trace still says how the session ended, then it goes on up
            self.status = "interrupted"
            self._session_end(self._calls_since(calls_before), "interrupted", started)
            raise
        except Exception as exc:
            if not getattr(exc, "ends_task", False):
                raise
            # an input wait that timed out (or the session ending under it): the service ends the task
            self.status = "failed"
            self._session_end(self._calls_since(calls_before), "failed", started)
            raise
        stats = {**self._calls_since(calls_before), **stats}
        exit_status = {"completed": "ok"}.get(state, stats.pop("exit_status", "failed"))
        if state == "failed" and _canceled(context):
            # A client's tasks/cancel is not a failure of the session: its status stays as it was.
            self.status, self.last_error = status_before, error_before
        elif state == "failed" and self.status == "ok":
            self.status = "failed"
        self._session_end(stats, exit_status, started)
        ceiling = self.tools.shell if self.tools.shell is not None else getattr(self.tools, "disk", None)
        workdir_error = ceiling.workdir_exceeded() if ceiling is not None else None
        if workdir_error is not None:
            self.last_error, self.status, state, text = workdir_error, "failed", "failed", workdir_error.message
        return TaskOutcome(state=state, text=text, history=history, stats=stats)

    def _calls_since(self, before: tuple[int, int]) -> dict[str, int]:
        return {"tool_calls": self.tools.tool_calls - before[0], "shell_calls": self.tools.shell_calls - before[1]}

    def _run_plain(self, request: TaskRequest, context: TaskContext) -> tuple[str, str, dict, Any]:
        """A plain tool capsule: call capsule.wasm's run(); its out/result.txt is the result."""
        from mur.wasm.host import WasmHost

        tools = self.tools
        capsule_tool = _CapsuleTool(self.checked.capsule_wasm)
        cfg = tools.guest_config(capsule_tool)
        host = WasmHost(shell=tools.guest_shell, request_input=context.request_input, engine=tools.host.engine,
                        catalog=tools.catalog(self.session_id), on_send=self._traced_send)
        result = "/".join(p for p in ((tools.scope_of(capsule_tool) or ""), "out", "result.txt") if p)
        with Tree(self.wd.accessible) as accessible:
            try:
                accessible.unlink(result)
            except OSError:
                pass
            host.run_capsule(cfg, tools.invoke)
            try:  # a regular file, read without following a link (a shell tool may have swapped it)
                text = accessible.read_text(result) if accessible.lstat(result) is not None else None
            except OSError as exc:
                message = f"cannot read the capsule's out/result.txt: {exc.strerror or exc}"
                self.last_error = MurError("E-IO-002" if isinstance(exc, LinkRefused) else "E-IO-003",
                                           f"capsule run failed: {message}")
                return "failed", f"error: {message}", {"turns": 0}, None
        if text is None:
            message = "the capsule component finished without writing out/result.txt"
            self.last_error = MurError("E-RUN-007", f"capsule run failed: {message}")
            return "failed", f"error: {message}", {"turns": 0}, None
        if text.startswith("error:"):
            self.last_error = MurError("E-RUN-007", f"capsule run failed: {text.strip()[len('error:'):].strip()}")
            return "failed", text, {"turns": 0}, None
        return "completed", text, {"turns": 0}, None

    def _run_agent(self, request: TaskRequest, context: TaskContext) -> tuple[str, str, dict, Any]:
        from mur.inference.loop import LoopConfig, run_agent_loop, run_reopenable_task
        from mur.inference.prompts import build_system_prompt
        from mur.session.driver import driver_client
        from mur.session.stream import TaskStream

        checked = self.checked
        capsule = checked.capsule
        inf = capsule.inference
        tools = self.tools
        if inf.transport == "process":
            from mur.inference.prompts import build_process_system_prompt
            from mur.inference.process import run_process_transport

            outcome = run_process_transport(
                request.text,
                command=checked.process_command or inf.effective_command,
                model=inf.model,
                max_turns=inf.max_turns,
                system_prompt=build_process_system_prompt(checked.prompts.system),
                workdir=self.wd.session,
                cwd=self.process_cwd,
                env=_process_env(),
                trace=self.trace.write,
                should_stop=getattr(context, "stop_reason", None),
            )
        else:
            stream = TaskStream(context)
            client = driver_client(self.tools, inf, self.reporter, self.continuation, request.context_id)
            cfg = LoopConfig(
                model=inf.model,
                max_turns=inf.max_turns,
                max_tokens=inf.effective_max_tokens,
                system_prompt=build_system_prompt(checked.prompts.system, capsule_name=capsule.name,
                                                  capsule_version=capsule.version),
                context_max_tokens=capsule.context.max_tokens,
                compaction=inf.compaction,
                compaction_system_prompt=checked.prompts.compaction,
                max_task_reopens=inf.max_task_reopens,
                should_stop=getattr(context, "stop_reason", None),
                events=stream,
                log=self._bootstrap_log,
            )
            with tools.serving(context, stream.on_chunk):  # tools may ask for input, drivers stream
                if self.hooks is not None:  # the loop calls the hooks' decisions (compaction, reopening)
                    outcome = run_reopenable_task(
                        request.text, cfg, client, tools, self.trace.write, history=request.history,
                        workdir=self.wd.session, compactor=self.hooks.compactor(), on_task_end=self.hooks.on_task_end,
                        task_id=self.hooks.current_task or "",
                    )
                else:
                    outcome = run_agent_loop(
                        request.text, cfg, client, tools, self.trace.write, history=request.history,
                        workdir=self.wd.session,
                    )
            if outcome.exit_status == "ok":
                from mur.inference.messages import to_wire_messages

                self.continuation.advance(to_wire_messages(outcome.messages), request.context_id)
        stats = {
            "turns": outcome.turns,
            "input_tokens": outcome.input_tokens,
            "output_tokens": outcome.output_tokens,
            "tool_calls": outcome.tool_calls,
            "exit_status": outcome.exit_status,
            "reopen_count": getattr(outcome, "reopen_count", 0),
        }
        if outcome.exit_status == "ok":
            return "completed", outcome.result, stats, outcome.messages
        code = outcome.error_code or "E-RUN-007"
        message = outcome.error or outcome.result
        if outcome.exit_status == "max_turns_reached":
            message = f"agent loop failed: max_turns ({inf.max_turns}) reached before the task completed"
            self.status = "max_turns_reached"
        self.last_error = MurError(code, message, None if outcome.exit_status == "max_turns_reached" else outcome.error_hint)
        return "failed", message, stats, None

    def _bootstrap_log(self, line: str) -> None:
        from mur.fsafe import append_text

        try:
            append_text(self.wd.bootstrap_log, line.rstrip("\n") + "\n")
        except OSError:
            pass

    def _traced_send(self, info: dict) -> None:
        """A capsule's murmur:message/send that reached its peer: upstream's a2a_send event."""
        self.trace.emit(ev.A2A_SEND, peer_url=info.get("peer_url"), message_id=info.get("message_id"),
                        task_id=info.get("task_id"), context_id=info.get("context_id"),
                        traceparent=info.get("traceparent"))


class _CapsuleTool:
    """Adapter so the capsule component gets a GuestConfig like any tool (capsule-wide grants)."""

    def __init__(self, wasm_path: Path | None):
        self.name = "__capsule__"
        self.wasm_path = wasm_path
        self.role = "capsule"


def _canceled(context: TaskContext) -> bool:
    """Did this task stop because a client canceled it (tasks/cancel)?"""
    from mur.a2a.tasks import CANCELED_MESSAGE

    stop_reason = getattr(context, "stop_reason", None)
    return stop_reason is not None and stop_reason() == CANCELED_MESSAGE


def _process_env() -> dict[str, str]:
    """The claude CLI's environment: the host's, so its own configured credentials work."""
    return dict(os.environ)
