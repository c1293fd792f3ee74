"""A failed tool explains itself in `mur trace show` / `mur trace steps`: a real `mur run` (the scripted
loopback model of integration/sandbox/hostile.py, the real sandbox) whose shell tool runs a file it
may not execute (exit 126) and whose model asks for a tool that does not exist.

The reason (mur's words: `exit code 126: ...`, `tool 'nope' is not declared in manifest allowlist`) is always shown; the shell's
stderr tail (`Permission denied`) only when `trace.include_tool_output` is on, because it is the
tool's output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sandbox"))
from hostile import HostileCapsule  # noqa: E402  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock]

NOT_EXECUTABLE = "printf 'echo hi\\n' > script.sh && ./script.sh"
CALLS = [NOT_EXECUTABLE, {"name": "nope", "input": {}}]


def trace_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mur", "trace", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def run_capsule(root: Path, include_output: bool):
    extra = "trace:\n  include_tool_output: true\n" if include_output else ""
    capsule = HostileCapsule(root, manifest_extra=extra)
    run = capsule.run(CALLS)
    assert run.session is not None, run.describe()
    assert run.results[0].exit_code == 126, run.describe()
    return capsule, run


def test_with_tool_output_the_reason_and_the_stderr_tail_are_shown(tmp_path):
    capsule, run = run_capsule(tmp_path / "cap", include_output=True)
    [call, unknown] = run.events("tool_call")
    assert call["status"] == "error" and call["error"].startswith("exit code 126: found but not executed")
    assert unknown["error"] == "tool 'nope' is not declared in manifest allowlist"
    [shell] = run.events("shell")
    assert "Permission denied" in shell["stderr_tail"]

    steps = trace_cli("steps", str(run.session), cwd=capsule.root)
    assert steps.returncode == 0, steps.stderr
    lines = steps.stdout.splitlines()
    assert any(line.startswith("  0  tool_call    bash        ") for line in lines)  # upstream's row, then more
    at = next(i for i, line in enumerate(lines) if line.startswith("     tool_call   bash  ✗ error"))
    assert lines[at + 1].startswith("       error:  exit code 126: found but not executed (permission denied")
    shell_at = next(i for i, line in enumerate(lines) if line.startswith("     shell ") and "exit 126" in line)
    assert lines[shell_at + 1].startswith("       stderr: ") and "Permission denied" in lines[shell_at + 1]
    assert "       error:  tool 'nope' is not declared in manifest allowlist" in lines

    show = trace_cli("show", str(run.session), "--json", cwd=capsule.root)
    summary = json.loads(show.stdout)
    assert [c["error"] for c in summary["tool_calls"]["calls"]] == [call["error"], "tool 'nope' is not declared in manifest allowlist"]
    [failure] = summary["shell_calls"]["failures"]
    assert failure["exit_code"] == 126 and "Permission denied" in failure["stderr_tail"]
    human = trace_cli("show", str(run.session), cwd=capsule.root).stdout
    assert "      error: tool 'nope' is not declared in manifest allowlist" in human and "Permission denied" in human
    assert "count:      2  (0 ok, 2 error)  success 0.0%" in human.splitlines()
    assert "exit codes: 1 failed (exit 126)" in human.splitlines()

    # upstream's report block and diff rows hold on a real session's trace
    report = trace_cli("report", str(run.session), cwd=capsule.root)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert lines[0].startswith(f"Session {run.session.name[:12]}...  ")
    assert "  Tool calls:    2  (0 ok, 2 error)" in lines and "  Shell calls:   1  exit codes: 1 failed (exit 126)" in lines
    assert "tool success (%)       0.0            0.0            0.0            0.0" in lines
    diff = trace_cli("diff", str(run.session), str(run.session), cwd=capsule.root)
    assert diff.returncode == 0, diff.stderr
    assert "tool calls             2                2                =" in diff.stdout.splitlines()


def test_without_tool_output_the_reason_is_shown_and_stderr_is_not_recorded(tmp_path):
    capsule, run = run_capsule(tmp_path / "cap", include_output=False)
    [call, unknown] = run.events("tool_call")
    assert "output" not in call and call["error"].startswith("exit code 126")
    assert unknown["error"] == "tool 'nope' is not declared in manifest allowlist"
    [shell] = run.events("shell")
    assert "stderr_tail" not in shell
    raw = (run.session / "trace.jsonl").read_text()
    assert "Permission denied" not in raw  # the tool's stderr is its output: not in the trace

    steps = trace_cli("steps", str(run.session), cwd=capsule.root)
    assert steps.returncode == 0, steps.stderr
    assert "       error:  exit code 126: found but not executed (permission denied: not executable, or exec " \
           "refused there)" in steps.stdout.splitlines()
    assert "       error:  tool 'nope' is not declared in manifest allowlist" in steps.stdout.splitlines()
    assert "stderr:" not in steps.stdout
