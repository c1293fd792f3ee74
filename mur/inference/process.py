"""``transport: process``: the ``claude`` CLI as a subprocess speaking stream-json.

The CLI is spawned with the spec's flags plus the system prompt (the untrusted-content notice is
always there, C-4)::

    claude --print --output-format stream-json --verbose --input-format stream-json \
           --model <model> --tools "" --system-prompt <notices + inference.system_prompt>

The task goes to stdin as one JSON line (``{"type":"user","message":{...}}``), then stdin is closed.
Stdout is read line by line: each inference call the CLI makes is one *turn* — an ``assistant``
event opens it (events repeating the same ``message.id`` belong to it, thinking-only events never
open one) and the next ``tool_result``, new message or ``result`` closes it. A turn past
``max_turns`` kills the CLI (``max_turns_reached``). The ``result`` event's ``result`` text goes to
``out/result.txt``; an error result, a CLI that exits without one, unparseable output or the
wall-clock timeout (10 minutes) end the session ``failed`` with the reason (and the CLI's stderr
tail). Token counts are 0 — the stream-json protocol is not the provider's usage record (spec).
Tool calls of the CLI's own tools are traced as ``tool_call`` events for observability only.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from mur.errors import MurError
from mur.inference.loop import LoopOutcome, write_result
from mur.inference.prompts import build_process_system_prompt
from mur.trace import events as ev

DEFAULT_TIMEOUT = 600.0
EXIT_GRACE = 3.0
STOP_POLL = 0.25  # seconds between should_stop checks while the CLI runs
STDERR_TAIL = 4096

Trace = Callable[[dict[str, Any]], None]


def command_on_path(command: str, path: str | None = None) -> str | None:
    """The absolute path `command` resolves to (a bare name via PATH), or None."""
    if not command:
        return None
    if os.sep in command:
        candidate = Path(command)
        return str(candidate.resolve()) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    found = shutil.which(command, path=path)
    return str(Path(found).resolve()) if found else None


def process_argv(command: str, model: str, system_prompt: str | None) -> list[str]:
    """The CLI's argument vector; the notices are prepended to `system_prompt` unless already there."""
    argv = [command, "--print", "--output-format", "stream-json", "--verbose",
            "--input-format", "stream-json"]
    if model.strip():  # an empty --model is a hard error at the API
        argv += ["--model", model]
    argv += ["--tools", "", "--system-prompt", build_process_system_prompt(system_prompt)]
    return argv


def task_line(task: str) -> bytes:
    """The one stdin line carrying the task."""
    message = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": task}]}}
    return (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")


class _Stream:
    """Turns the CLI's stream-json events into turns, trace events and a result."""

    def __init__(self, max_turns: int, trace: Trace):
        self.max_turns, self.trace = max_turns, trace
        self.turns = 0
        self.tool_calls = 0
        self.open: dict[str, Any] | None = None
        self.pending: dict[str, dict[str, Any]] = {}
        self.result: str | None = None
        self.error: str | None = None
        self.over_budget = False

    def close_turn(self) -> None:
        if self.open is None:
            return
        turn, self.open = self.open, None
        self.trace({"event_type": ev.INFERENCE, "turn": turn["index"], "input_tokens": 0, "output_tokens": 0,
                    "decision": "tool_call" if turn["tool"] else "end_turn", "tool_name": turn["tool"]})

    def assistant(self, message: dict[str, Any]) -> None:
        if message.get("model") == "<synthetic>":
            return  # the CLI's own stand-in message (e.g. "API Error: ..."), not an inference call
        content = [b for b in message.get("content") or [] if isinstance(b, dict)]
        if not any(b.get("type") in ("text", "tool_use") for b in content):
            return  # thinking-only (or empty): not a model action, not a turn
        msg_id = message.get("id")
        if self.open is None or not msg_id or self.open["id"] != msg_id:
            self.close_turn()
            if self.turns >= self.max_turns:
                self.over_budget = True
                return
            self.open = {"index": self.turns, "id": msg_id, "tool": None}
            self.turns += 1
        for block in content:
            if block.get("type") != "tool_use":
                continue
            if self.open["tool"] is None:
                self.open["tool"] = block.get("name")
            args = block.get("input") or {}
            self.pending[str(block.get("id"))] = {
                "name": block.get("name"), "input": args, "turn": self.open["index"],
                "input_bytes": len(json.dumps(args).encode()), "started": time.monotonic(),
            }

    def tool_results(self, message: dict[str, Any]) -> None:
        blocks = [b for b in message.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_result"]
        if not blocks:
            return
        self.close_turn()
        for block in blocks:
            call = self.pending.pop(str(block.get("tool_use_id")), None)
            if call is None:
                continue
            inner = block.get("content")
            text = inner if isinstance(inner, str) else "".join(
                b.get("text", "") for b in inner or [] if isinstance(b, dict))
            self.tool_calls += 1
            self.trace({"event_type": ev.TOOL_CALL, "turn": call["turn"], "tool_name": call["name"],
                        "input": call["input"], "input_bytes": call["input_bytes"],
                        "output_bytes": len(text.encode()),
                        "duration_ms": int((time.monotonic() - call["started"]) * 1000),
                        "status": "error" if block.get("is_error") else "ok"})

    def feed(self, line: str) -> bool:
        """Handle one stdout line; True once the run is over (result seen or budget exceeded)."""
        try:
            event = json.loads(line)
        except ValueError:
            self.error = f"malformed JSON on the CLI's stdout: {line[:200]!r}"
            return True
        if not isinstance(event, dict):
            return False
        kind = event.get("type")
        if kind == "assistant":
            self.assistant(event.get("message") or {})
            return self.over_budget
        if kind == "user":
            self.tool_results(event.get("message") or {})
        elif kind == "result":
            self.close_turn()
            text = event.get("result")
            if event.get("is_error") or event.get("subtype") not in (None, "success"):
                self.error = f"claude returned an error: {text or event.get('subtype') or 'unknown error'}"
            else:
                self.result = text if isinstance(text, str) else ""
            return True
        return False


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _pump(stream: Any, sink: Callable[[bytes | None], None]) -> None:
    try:
        for line in iter(stream.readline, b""):
            sink(line)
    except (OSError, ValueError):
        pass
    sink(None)


class _StderrTail:
    """The last STDERR_TAIL bytes the CLI wrote to stderr, drained by a thread."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.thread: threading.Thread | None = None

    def add(self, chunk: bytes | None) -> None:
        if chunk:
            self.data.extend(chunk)
            del self.data[:-STDERR_TAIL]

    def text(self) -> str:
        """The tail for an error message (waits briefly for the drain to finish)."""
        if self.thread is not None:
            self.thread.join(timeout=2)
        text = bytes(self.data).decode("utf-8", "replace").strip()
        return f"\n--- claude stderr (tail) ---\n{text}" if text else ""


def _start(argv: list[str], cwd: Path, env: Mapping[str, str], task: str
           ) -> tuple[subprocess.Popen, "queue.Queue[bytes | None]", _StderrTail]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=cwd, env=dict(env), start_new_session=True)
    lines: queue.Queue[bytes | None] = queue.Queue()
    tail = _StderrTail()

    def feed_stdin() -> None:
        try:
            proc.stdin.write(task_line(task))
            proc.stdin.close()
        except OSError:
            pass  # the CLI died early; its stdout/stderr say why

    threads = [threading.Thread(target=_pump, args=(proc.stdout, lines.put), daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, tail.add), daemon=True),
               threading.Thread(target=feed_stdin, daemon=True)]
    tail.thread = threads[1]
    for thread in threads:
        thread.start()
    return proc, lines, tail


def run_process_transport(task: str, *, command: str, model: str, max_turns: int, system_prompt: str | None,
                          workdir: Path, env: Mapping[str, str], trace: Trace,
                          timeout: float = DEFAULT_TIMEOUT, cwd: Path | None = None,
                          should_stop: Callable[[], str | None] | None = None) -> LoopOutcome:
    """Run one task through the CLI; writes out/result.txt in `workdir`; never raises MurError.

    `env` is the CLI's complete environment (HOME, PATH, ANTHROPIC_* ...); `cwd` defaults to
    `workdir` (pass the accessible workdir when it differs from the session workdir).
    `should_stop` is polled while the CLI runs: a reason string ends it (tasks/cancel).
    """
    workdir = Path(workdir)
    stream = _Stream(max_turns, trace)

    def end(status: str, result: str, error: MurError | None = None) -> LoopOutcome:
        write_result(workdir, result)
        return LoopOutcome(exit_status=status, result=result, turns=stream.turns, tool_calls=stream.tool_calls,
                           error=error.message if error else None, error_code=error.code if error else None,
                           error_hint=error.hint if error else None)

    def failed(code: str, message: str) -> LoopOutcome:
        return end("failed", f"error: {message}", MurError(code, message))

    resolved = command_on_path(command, dict(env).get("PATH")) or command
    try:
        proc, lines, tail = _start(process_argv(resolved, model, system_prompt), Path(cwd or workdir), env, task)
    except FileNotFoundError:
        return failed("E-RUN-006", f"inference.command '{command}' not found on PATH")
    except OSError as exc:
        return failed("E-RUN-007", f"agent loop failed: cannot start '{command}': {exc.strerror or exc}")
    deadline = time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                _kill(proc)
                stream.close_turn()
                return failed("E-RUN-007", f"inference subprocess timed out after {timeout:g}s{tail.text()}")
            reason = should_stop() if should_stop is not None else None
            if reason:
                _kill(proc)
                stream.close_turn()
                out = failed("E-RUN-007", reason)
                out.stopped = True
                return out
            try:
                raw = lines.get(timeout=min(remaining, STOP_POLL))
            except queue.Empty:
                continue
            if raw is None:  # EOF: the CLI closed stdout without a result event
                try:
                    proc.wait(timeout=EXIT_GRACE)
                except subprocess.TimeoutExpired:
                    _kill(proc)
                stream.close_turn()
                return failed("E-RUN-007", "inference subprocess closed stdout without producing a result"
                                           f" (exit status {proc.poll()}){tail.text()}")
            line = raw.decode("utf-8", "replace").strip()
            if line and stream.feed(line):
                break
    except BaseException:  # Ctrl-C, SIGTERM's Terminated: the CLI runs in its own session, so it must go too
        _kill(proc)
        raise
    # Over: give the CLI a moment to exit on its own, then make sure it is gone.
    if not stream.over_budget:
        try:
            proc.wait(timeout=EXIT_GRACE)
        except subprocess.TimeoutExpired:
            pass
    _kill(proc)
    if stream.over_budget:
        return end("max_turns_reached", f"error: inference loop exceeded {max_turns} turns")
    if stream.error is not None:
        return failed("E-RUN-007", stream.error + (tail.text() if "malformed" in stream.error else ""))
    return end("ok", stream.result or "")
