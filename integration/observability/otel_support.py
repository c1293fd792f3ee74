"""Helpers for the OTel integration tests: a receiver process and a synthetic session trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
SID = "ses_019f01a940ce7761854e768ecbe3d399"
T0 = 1_760_000_000_000


class ReceiverProcess:
    """`python -m mur.testing.otlp_receiver --port 0 ...` run as its own process."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mur.testing.otlp_receiver", "--port", "0", "--quiet", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"receiver did not start: {self.proc.stderr.read()}")
        info = json.loads(line)
        self.url: str = info["url"]
        assert info["pid"] == self.proc.pid

    def received(self) -> dict:
        return httpx.get(self.url + "/spans", timeout=5).json()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc.stdout.close()
        self.proc.stderr.close()


def session_events(sid: str = SID, t0: int = T0) -> list[dict]:
    """Two tasks: the first with inference, a bash tool call + its shell line, a compaction; the second fails."""

    def ev(kind: str, dt: int, **fields) -> dict:
        return {"event_type": kind, "session_id": sid, "timestamp": t0 + dt, **fields}

    start = dict(capsule_name="demo", capsule_version="2.3.4", model="claude-x", max_turns=5, capabilities=["shell"],
                 tools_declared=["bash"], containment_declared="advisory", containment_achieved="scoped",
                 workdir_exec=False, system_prompt_source="none", system_prompt_sha256=None)
    return [
        ev("task_start", 0, task_id="tsk_1", context_id="ctx_1", source="task_md", message_parts_bytes=5),
        ev("session_start", 1, **start),
        ev("inference", 100, turn=0, input_tokens=100, output_tokens=20, decision="tool_call", tool_name="bash"),
        ev("tool_call", 180, turn=0, tool_name="bash", input={"command": "echo hi"}, input_bytes=20,
           output_bytes=40, duration_ms=60, status="ok"),
        ev("shell", 181, turn=0, binary="/usr/bin/bash", command="echo " + "y" * 400, exit_code=0,
           stdout_bytes=3, stderr_bytes=0, duration_ms=40),
        ev("compaction", 250, turn=1, tokens_before=9000, tokens_after=800),
        ev("inference", 300, turn=1, input_tokens=150, output_tokens=30, decision="end_turn", tool_name=None),
        ev("session_end", 310, total_turns=2, total_input_tokens=250, total_output_tokens=50, total_tool_calls=1,
           total_shell_calls=1, duration_ms=309, exit_status="ok"),
        ev("task_end", 311, task_id="tsk_1", exit_status="ok", duration_ms=311, turns=2, input_tokens=250,
           output_tokens=50, tool_calls=1, shell_calls=1, reopen_count=0),
        ev("task_start", 500, task_id="tsk_2", context_id="ctx_2", source="a2a", message_parts_bytes=3),
        ev("session_start", 501, **start),
        ev("inference", 600, turn=0, input_tokens=10, output_tokens=2, decision="text", tool_name=None),
        ev("session_end", 610, total_turns=3, total_input_tokens=260, total_output_tokens=52, total_tool_calls=1,
           total_shell_calls=1, duration_ms=109, exit_status="failed"),
        ev("task_end", 611, task_id="tsk_2", exit_status="failed", duration_ms=111, turns=1, input_tokens=10,
           output_tokens=2, tool_calls=0, shell_calls=0, reopen_count=0),
    ]
