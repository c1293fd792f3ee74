"""Tool dispatch for a session: one place that runs WASM tools, shell tools and skills, and traces them.

Both callers go through here: the agent loop (model tool calls: `specs()` + `call()`) and capsule
components (`murmur:tool-registry/invoke`: `invoke()`), so a tool behaves and is traced the same way
whoever calls it. Every call writes a `tool_call` event; shell calls add a `shell` event after it
(upstream section 3.3); skills write `skill_call`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from mur.errors import MurError
from mur.fsafe import LinkRefused, Tree, proc_path
from mur.session.staging import Staged, StagedTool
from mur.session.workdir import refused
from mur.trace import events as ev, failures

if TYPE_CHECKING:
    from mur.a2a.lifecycle import TaskContext
    from mur.manifest.capsule import Limits
    from mur.manifest.grants import ArtifactGrant
    from mur.manifest.network import AllowEntry
    from mur.sandbox.result import ShellResult
    from mur.sandbox.shell import ShellSandbox
    from mur.trace.writer import TraceWriter
    from mur.wasm.host import GuestConfig
    from mur.wasm.peer import Catalog

PROC_FD = "/proc/self/fd"
# What a shell or native tool sees of the session's identity (upstream: identity env for tools).
IDENTITY_VARS = ("MURMUR_CAPSULE_NAME", "MURMUR_CAPSULE_VERSION", "MURMUR_SESSION_ID", "MURMUR_CAPSULE_URL")


def not_declared(name: str) -> str:
    """Upstream's words for a call to a tool the manifest does not declare."""
    return f"tool '{name}' is not declared in manifest allowlist"


@dataclass
class GuestSettings:
    """What every guest of this session shares: env inputs, limits, the allow-list ceiling."""

    env_allow: list[str]
    strip_env: list[str]
    murmur_vars: dict[str, str]
    limits: Limits
    ceiling: list[AllowEntry]
    accessible: Path
    capsule_scope: str | None
    grants: dict[str, ArtifactGrant]
    logs_dir: Path | None = None  # guest stdout/stderr go to <logs_dir>/tool-<name>.log
    include_output: bool = False
    extra_vars: dict[str, dict[str, str]] = field(default_factory=dict)  # per-artifact MURMUR_* additions


class SessionTools:
    """The session's tool registry and dispatcher."""

    def __init__(self, staged: Staged, settings: GuestSettings, shell: ShellSandbox | None, trace: TraceWriter):
        from mur.wasm.host import WasmHost

        self.staged = staged
        self.settings = settings
        self.shell = shell
        self.disk: Any = None  # the workdir ceiling of a session without subprocesses (mur.sandbox.guestdisk)
        self.trace = trace
        self.host = WasmHost(shell=self.guest_shell)  # the guests' host (a task's own while it runs: serving())
        self.turn = 0
        self.tool_calls = 0
        self.shell_calls = 0
        self.on_http: Callable[[dict], None] | None = None
        self.hidden: set[str] = set()  # staged but not offered to the model (a skill bound as the prompt)
        self._scope_fds: dict[str, int] = {}

    def close(self) -> None:
        """Release the directory fds held for scoped preopens."""
        for fd in self._scope_fds.values():
            os.close(fd)
        self._scope_fds.clear()

    # --- what the model sees -----------------------------------------------------------------

    def visible(self) -> list[StagedTool]:
        return [t for t in self.staged.tools.values()
                if t.role in ("tool", "shell", "skill") and t.name not in self.hidden]

    def specs(self) -> list[dict[str, Any]]:
        """Anthropic-style tool specs for every model-visible tool."""
        out = []
        for tool in self.visible():
            if tool.role == "skill":
                out.append(
                    {
                        "name": tool.name,
                        "description": f"Skill '{tool.name}': returns its instructions (skill.md). {tool.description}".strip(),
                        "input_schema": {"type": "object", "properties": {}},
                    }
                )
                continue
            out.append(
                {
                    "name": tool.name,
                    "description": tool.description or f"{tool.kind} tool {tool.name}",
                    "input_schema": tool.input_schema or {"type": "object"},
                }
            )
        return out

    @contextlib.contextmanager
    def serving(self, context: TaskContext | None, on_chunk: Callable[[str, str], None] | None) -> Iterator[None]:
        """While one A2A task runs: its tools may ask for input (murmur:task request-input ->
        input-required) and the driver's and tools' chunks become stream frames."""
        from mur.wasm.host import WasmHost

        before = self.host
        self.host = WasmHost(shell=self.guest_shell, request_input=getattr(context, "request_input", None),
                             engine=before.engine, on_chunk=on_chunk)
        try:
            yield
        finally:
            self.host = before

    def catalog(self, session_id: str) -> Catalog:
        """What murmur:artifact-manager lists: the model-visible tools and skills, then the shell binaries."""
        from mur.wasm.peer import Catalog, CatalogEntry

        entries = []
        for tool in self.visible():
            runtime = "native" if tool.kind in ("native", "shell") else "wasm"
            version = "0.0.0" if tool.kind == "shell" else tool.version
            schema = json.dumps(tool.input_schema) if tool.role != "skill" and tool.input_schema else None
            entries.append(CatalogEntry(tool.name, version, runtime, tool.description, input_schema=schema))
        return Catalog(session_id, entries)

    # --- guest configuration -----------------------------------------------------------------

    def guest_config(self, tool: StagedTool) -> GuestConfig:
        """The GuestConfig for a tool or driver: preopen, env, limits, narrowed allow list."""
        from mur.wasm.env import guest_env
        from mur.wasm.host import GuestConfig

        s = self.settings
        grant = s.grants.get(tool.name)
        preopen = self.preopen_dir(self.scope_of(tool))
        network = grant.effective_network(s.ceiling) if grant is not None else list(s.ceiling)
        murmur_vars = dict(s.murmur_vars)
        murmur_vars.update(s.extra_vars.get(tool.name, {}))
        env = guest_env(s.env_allow, s.strip_env, os.environ, murmur_vars)
        return GuestConfig(
            wasm_path=tool.wasm_path,
            label=tool.name,
            preopen=preopen,
            env=env,
            limits=s.limits,
            http_allow=network,
            on_http=self._http_event(tool.name),
            log_path=(s.logs_dir / f"{'capsule' if tool.role == 'capsule' else 'tool-' + tool.name}.log") if s.logs_dir else None,
        )

    def scope_of(self, tool: Any) -> str | None:
        """The workdir-relative directory a guest gets as "." ("" = the whole workdir; None = none)."""
        s = self.settings
        grant = s.grants.get(tool.name)
        if grant is not None and grant.preopen == "none":
            return None
        return (grant.scope if grant is not None and grant.scope else s.capsule_scope) or ""

    def preopen_dir(self, scope: str | None) -> Path | None:
        """The host directory for a guest's "." preopen. A scope is created beneath the workdir
        without following a link and handed over as /proc/self/fd/N of a directory fd held for the
        session: a tool that swaps the directory for a link later cannot redirect the next guest."""
        accessible = self.settings.accessible
        if scope is None or not scope.strip("./"):
            return None if scope is None else accessible
        fd = self._scope_fds.get(scope)
        if fd is None:
            try:
                with Tree(accessible) as tree:
                    fd = self._scope_fds[scope] = tree.makedirs(scope)
            except LinkRefused as exc:
                raise refused(exc, accessible) from exc
        return Path(proc_path(fd)) if os.path.isdir(PROC_FD) else accessible / scope

    def _http_event(self, artifact: str) -> Callable[[dict], None]:
        def record(info: dict) -> None:
            if not info.get("allowed", True):
                self.trace.emit(
                    ev.NETWORK_DENIED,
                    turn=self.turn,
                    artifact=artifact,
                    url=info.get("url"),
                    method=info.get("method"),
                    reason=info.get("error") or "not in capabilities.network.allow",
                )
            if self.on_http is not None:
                self.on_http(info)

        return record

    # --- dispatch ------------------------------------------------------------------------------

    def call(self, name: str, tool_input: dict[str, Any], turn: int | None = None) -> tuple[str, bool]:
        """A model tool call: returns (tool_result content, is_error)."""
        if turn is not None:
            self.turn = turn
        tool = self.staged.tools.get(name) if name not in self.hidden else None
        raw = json.dumps(tool_input, separators=(",", ":"))
        start = time.monotonic()
        if tool is None or tool.role not in ("tool", "shell", "skill"):
            content = json.dumps({"status": "error", "summary": not_declared(name)})
            self._record_tool(name, tool_input, raw, content, start, "error", reason=not_declared(name))
            return content, True
        if tool.role == "skill":
            text = tool.text or ""
            self.trace.emit(
                ev.SKILL_CALL, turn=self.turn, skill_name=name, output_bytes=len(text.encode()),
                duration_ms=_ms(start), status="ok",
            )
            return text, False
        if tool.kind == "shell":
            return self._call_shell(tool, tool_input, raw, start)
        result, reason = self._run_native(tool, raw) if tool.kind == "native" else self._run_wasm(tool, raw)
        content = json.dumps(_result_json(result), separators=(",", ":"))
        status = "ok" if result.status == "passed" else "error"
        self._record_tool(name, tool_input, raw, content, start, status, result, reason=reason)
        return content, result.status != "passed"

    def invoke(self, name: str, data: Any) -> Any:
        """`murmur:tool-registry/invoke` from a capsule component: ToolInput -> ToolResult."""
        from mur.wasm.types import ToolResult

        start = time.monotonic()
        tool = self.staged.tools.get(name) if name not in self.hidden else None
        raw = data.data or ""
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"input": raw}
        if not isinstance(parsed, dict):
            parsed = {"input": parsed}
        if tool is None or tool.role not in ("tool", "shell", "skill"):
            # err(...) to the capsule, as upstream: the call was never made
            self._record_tool(name, parsed, raw, not_declared(name), start, "error", reason=not_declared(name))
            raise MurError("E-RUN-015", not_declared(name))
        if tool.role == "skill":
            content, _ = self.call(name, parsed)
            return ToolResult("passed", summary=f"skill {name}", data=content)
        if tool.kind == "shell":
            content, is_error = self._call_shell(tool, parsed, raw, start)
            body = json.loads(content)
            return ToolResult(
                "failed" if is_error else "passed",
                summary=body.get("summary"),
                data=body.get("data"),
                data_path=body.get("data_path"),
                truncated=bool(body.get("truncated")),
            )
        result, reason = self._run_native(tool, raw) if tool.kind == "native" else self._run_wasm(tool, raw)
        status = "ok" if result.status == "passed" else "error"
        self._record_tool(name, parsed, raw, json.dumps(_result_json(result)), start, status, result, reason=reason)
        return result

    def _run_native(self, tool: StagedTool, raw: str) -> tuple[Any, str | None]:
        """A native tool: its staged binary inside the shell sandbox (mur.session.native); (result, reason)."""
        from mur.session import native
        from mur.wasm.types import ToolResult

        if self.shell is None:
            why = f"native tool '{tool.name}' cannot run: the shell sandbox is not running"
            return ToolResult("error", summary=why), why
        try:
            res = self.shell.run(tool.name, args=[], env=self._identity(), stdin=native.stdin_for(raw, None))
        except MurError as err:
            return ToolResult("error", summary=err.message), f"[{err.code}] {err.message}"
        result = native.tool_result(tool.name, res)
        return result, None if result.status == "passed" else result.summary

    def _identity(self) -> list[tuple[str, str]]:
        """The identity variables a shell or native tool gets on top of the sandbox's environment."""
        return [(k, self.settings.murmur_vars[k]) for k in IDENTITY_VARS if k in self.settings.murmur_vars]

    def _run_wasm(self, tool: StagedTool, raw: str) -> tuple[Any, str | None]:
        """(the tool's result, mur's reason when it failed: the guest's own summary is its output)."""
        from mur.wasm.types import ToolInput, ToolResult

        if tool.kind != "wasm" or tool.wasm_path is None:
            why = f"tool '{tool.name}' has no runnable payload ({tool.kind})"
            return ToolResult("error", summary=why), why
        try:
            result = self.host.call_tool(self.guest_config(tool), ToolInput(data=raw, log_path=f"logs/tool-{tool.name}.log"))
        except MurError as err:
            if getattr(err, "limit", None) is not None or err.code in ("E-RUN-001", "E-IO-002"):
                # A guest limit or trap, or a link a tool put where its scope should be, ends this
                # call, not the session: the model sees the error.
                return ToolResult("error", summary=err.message), f"[{err.code}] {err.message}"
            raise
        return result, None if result.status == "passed" else f"the tool returned status '{result.status}'"

    def _call_shell(self, tool: StagedTool, tool_input: dict, raw: str, start: float) -> tuple[str, bool]:
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        if not isinstance(command, str):
            why = "shell tools take {\"command\": \"...\"}"
            content = json.dumps({"status": "error", "summary": why})
            self._record_tool(tool.name, tool_input, raw, content, start, "error", reason=why)
            return content, True
        if self.shell is None:
            content = json.dumps({"status": "error", "summary": "shell capability not granted"})
            self._record_tool(tool.name, tool_input, raw, content, start, "error", reason="shell capability not granted")
            return content, True
        try:
            res = self.shell.run(tool.name, command=command, env=self._identity())
        except MurError as err:
            content = json.dumps({"status": "error", "summary": err.message})
            self._record_tool(tool.name, tool_input, raw, content, start, "error", reason=f"[{err.code}] {err.message}")
            return content, True
        body = _shell_json(res)
        content = json.dumps(body, separators=(",", ":"))
        failed = res.exit_code != 0
        reason = failures.shell_reason(res.exit_code, body["summary"], bool(res.timed_out)) if failed else None
        self._record_tool(tool.name, tool_input, raw, content, start, "error" if failed else "ok", reason=reason)
        self._record_shell(res)
        return content, failed

    def guest_shell(self, binary: str, args: list[str], env: list[tuple[str, str]]) -> Any:
        """`murmur:shell/execute` from a guest: same sandbox, same `shell` trace event."""
        if self.shell is None:
            raise MurError("E-RUN-015", "shell capability not granted")
        res = self.shell.run(binary, args=list(args), env=self._identity() + list(env))
        self._record_shell(res)
        return res

    # --- trace -----------------------------------------------------------------------------------

    def _record_tool(self, name, tool_input, raw, content, start, status, result=None, reason=None) -> None:
        """The `tool_call` event; a failed one carries `error`, mur's reason (never the tool's output)."""
        self.tool_calls += 1
        event: dict[str, Any] = {
            "turn": self.turn,
            "tool_name": name,
            "input": tool_input if isinstance(tool_input, dict) else {"input": tool_input},
            "input_bytes": len(raw.encode("utf-8")),
        }
        if self.settings.include_output:
            event["output"] = content
        event.update({"output_bytes": len(content.encode("utf-8")), "duration_ms": _ms(start), "status": status})
        if status != "ok" and reason:
            event["error"] = failures.short(reason)
        for key, value in (getattr(result, "metadata", None) or []):
            if key in ("state_effect", "resource_id"):
                event[key] = value
        self.trace.emit(ev.TOOL_CALL, **event)

    def _record_shell(self, res: ShellResult) -> None:
        self.shell_calls += 1
        event = {
            "turn": self.turn,
            "binary": res.binary,
            "command": res.command,
            "exit_code": res.exit_code,
            "stdout_bytes": res.stdout_bytes,
            "stderr_bytes": res.stderr_bytes,
            "duration_ms": res.duration_ms,
        }
        if res.resource_limit:
            event["resource_limit"] = res.resource_limit
        if res.exit_code != 0 and self.settings.include_output and res.stderr:  # stderr is the tool's output
            event["stderr_tail"] = failures.tail(res.stderr)
        self.trace.emit(ev.SHELL, **event)


def _ms(start: float) -> int:
    return int((time.monotonic() - start) * 1000)


def _result_json(result: Any) -> dict[str, Any]:
    return {
        "status": result.status,
        "summary": result.summary,
        "data": result.data,
        "data_path": result.data_path,
        "truncated": result.truncated,
    }


def _shell_json(res: Any) -> dict[str, Any]:
    data = res.stdout if not res.stderr else f"{res.stdout}\n[stderr]\n{res.stderr}"
    summary = f"exit code {res.exit_code}"
    if res.resource_limit:
        from mur.sandbox.shell import limit_error

        summary += f" — {limit_error(res).render()}"
    return {
        "status": "passed" if res.exit_code == 0 else "failed",
        "summary": summary,
        "data": data,
        "data_path": None,
        "log_path": res.full_output_path,
        "truncated": res.truncated,
    }
