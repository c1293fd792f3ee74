"""Tool dispatch for a session: one place that runs WASM tools, shell tools and skills, and traces them.

Both callers go through here: the agent loop (model tool calls: `specs()` + `call()`) and capsule
components (`murmur:tool-registry/invoke`: `invoke()`), so a tool behaves and is traced the same way
whoever calls it. Every call writes a `tool_call` event; shell calls add a `shell` event after it
(upstream section 3.3); skills write `skill_call`.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.fsafe import LinkRefused, Tree, proc_path
from mur.session.staging import Staged, StagedTool
from mur.session.workdir import refused
from mur.trace import events as ev

PROC_FD = "/proc/self/fd"


@dataclass
class GuestSettings:
    """What every guest of this session shares: env inputs, limits, the allow-list ceiling."""

    env_allow: list[str]
    strip_env: list[str]
    murmur_vars: dict[str, str]
    limits: Any
    ceiling: list[Any]
    accessible: Path
    capsule_scope: str | None
    grants: dict[str, Any]
    logs_dir: Path | None = None  # guest stdout/stderr go to <logs_dir>/tool-<name>.log
    include_output: bool = False
    extra_vars: dict[str, dict[str, str]] = field(default_factory=dict)  # per-artifact MURMUR_* additions


class SessionTools:
    """The session's tool registry and dispatcher."""

    def __init__(self, staged: Staged, settings: GuestSettings, host: Any, shell: Any, trace: Any):
        self.staged = staged
        self.settings = settings
        self.host = host
        self.shell = shell
        self.disk: Any = None  # the workdir ceiling of a session without subprocesses (mur.sandbox.guestdisk)
        self.trace = trace
        self.turn = 0
        self.tool_calls = 0
        self.shell_calls = 0
        self.on_http: Callable[[dict], None] | None = None
        self._scope_fds: dict[str, int] = {}

    def close(self) -> None:
        """Release the directory fds held for scoped preopens."""
        for fd in self._scope_fds.values():
            os.close(fd)
        self._scope_fds.clear()

    # --- what the model sees -----------------------------------------------------------------

    def visible(self) -> list[StagedTool]:
        return [t for t in self.staged.tools.values() if t.role in ("tool", "shell", "skill")]

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

    # --- guest configuration -----------------------------------------------------------------

    def guest_config(self, tool: StagedTool) -> Any:
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
        tool = self.staged.tools.get(name)
        raw = json.dumps(tool_input, separators=(",", ":"))
        start = time.monotonic()
        if tool is None or tool.role not in ("tool", "shell", "skill"):
            content = json.dumps({"status": "error", "summary": f"unknown tool '{name}'"})
            self._record_tool(name, tool_input, raw, content, start, "error")
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
        result = self._run_wasm(tool, raw)
        content = json.dumps(_result_json(result), separators=(",", ":"))
        status = "ok" if result.status == "passed" else "error"
        self._record_tool(name, tool_input, raw, content, start, status, result)
        return content, result.status != "passed"

    def invoke(self, name: str, data: Any) -> Any:
        """`murmur:tool-registry/invoke` from a capsule component: ToolInput -> ToolResult."""
        from mur.wasm.types import ToolResult

        start = time.monotonic()
        tool = self.staged.tools.get(name)
        raw = data.data or ""
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {"input": raw}
        if not isinstance(parsed, dict):
            parsed = {"input": parsed}
        if tool is None or tool.role not in ("tool", "shell", "skill"):
            result = ToolResult("error", summary=f"unknown tool '{name}'")
            self._record_tool(name, parsed, raw, result.summary or "", start, "error", result)
            return result
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
        result = self._run_wasm(tool, raw)
        status = "ok" if result.status == "passed" else "error"
        self._record_tool(name, parsed, raw, json.dumps(_result_json(result)), start, status, result)
        return result

    def _run_wasm(self, tool: StagedTool, raw: str) -> Any:
        from mur.wasm.types import ToolInput, ToolResult

        if tool.kind != "wasm" or tool.wasm_path is None:
            return ToolResult("error", summary=f"tool '{tool.name}' has a {tool.kind} implementation, which this runtime does not run")
        try:
            return self.host.call_tool(self.guest_config(tool), ToolInput(data=raw, log_path=f"logs/tool-{tool.name}.log"))
        except MurError as err:
            if getattr(err, "limit", None) is not None or err.code in ("E-RUN-001", "E-IO-002"):
                # A guest limit or trap, or a link a tool put where its scope should be, ends this
                # call, not the session: the model sees the error.
                return ToolResult("error", summary=err.message)
            raise

    def _call_shell(self, tool: StagedTool, tool_input: dict, raw: str, start: float) -> tuple[str, bool]:
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        if not isinstance(command, str):
            content = json.dumps({"status": "error", "summary": "shell tools take {\"command\": \"...\"}"})
            self._record_tool(tool.name, tool_input, raw, content, start, "error")
            return content, True
        if self.shell is None:
            content = json.dumps({"status": "error", "summary": "shell capability not granted"})
            self._record_tool(tool.name, tool_input, raw, content, start, "error")
            return content, True
        try:
            res = self.shell.run(tool.name, command=command)
        except MurError as err:
            content = json.dumps({"status": "error", "summary": err.message})
            self._record_tool(tool.name, tool_input, raw, content, start, "error")
            return content, True
        body = _shell_json(res)
        content = json.dumps(body, separators=(",", ":"))
        failed = res.exit_code != 0
        self._record_tool(tool.name, tool_input, raw, content, start, "error" if failed else "ok")
        self._record_shell(res)
        return content, failed

    def guest_shell(self, binary: str, args: list[str], env: list[tuple[str, str]]) -> Any:
        """`murmur:shell/execute` from a guest: same sandbox, same `shell` trace event."""
        if self.shell is None:
            raise MurError("E-RUN-015", "shell capability not granted")
        res = self.shell.run(binary, args=list(args), env=list(env))
        self._record_shell(res)
        return res

    # --- trace -----------------------------------------------------------------------------------

    def _record_tool(self, name, tool_input, raw, content, start, status, result=None) -> None:
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
        for key, value in (getattr(result, "metadata", None) or []):
            if key in ("state_effect", "resource_id"):
                event[key] = value
        self.trace.emit(ev.TOOL_CALL, **event)

    def _record_shell(self, res: Any) -> None:
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
