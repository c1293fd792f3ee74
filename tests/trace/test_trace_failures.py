"""A failed tool explains itself in `mur trace show` and `mur trace steps` (the real CLI on synthetic traces):
the `error` the writer records, the `stderr_tail` of a failed shell call (include_tool_output only),
and, for a trace written before those fields, what its traced `output` holds."""

from __future__ import annotations

import json
from pathlib import Path

from trace_events import SID, T0, mur, write_trace

from mur.trace import failures


def events(tool_call: dict, shell: dict | None) -> list[dict]:
    def ev(kind: str, dt: int, **fields) -> dict:
        return {"event_type": kind, "session_id": SID, "timestamp": T0 + dt, **fields}

    out = [
        ev("task_start", 0, task_id="tsk_1", context_id="c", source="task_md", message_parts_bytes=3),
        ev("session_start", 1, capsule_name="cap", capsule_version="1.0.0", model="m", max_turns=3),
        ev("inference", 2, turn=0, input_tokens=10, output_tokens=2, decision="tool_call", tool_name="bash"),
        ev("tool_call", 3, turn=0, tool_name="bash", input={"command": "./x"}, input_bytes=17, output_bytes=90,
           duration_ms=4, status="error", **tool_call),
    ]
    if shell is not None:
        out.append(ev("shell", 4, turn=0, binary="/usr/bin/bash", command="./x", stdout_bytes=0, stderr_bytes=40,
                      duration_ms=3, **shell))
    out += [
        ev("inference", 5, turn=1, input_tokens=12, output_tokens=3, decision="end_turn", tool_name=None),
        ev("session_end", 6, total_turns=2, total_input_tokens=22, total_output_tokens=5, total_tool_calls=1,
           total_shell_calls=1, duration_ms=6, exit_status="ok"),
        ev("task_end", 7, task_id="tsk_1", exit_status="ok", duration_ms=7, turns=2, input_tokens=22,
           output_tokens=5, tool_calls=1, shell_calls=1),
    ]
    return out


def steps(tmp_path: Path, trace: list[dict]) -> list[str]:
    write_trace(tmp_path / "workdir", SID, trace)
    run = mur("trace", "steps", cwd=tmp_path)
    assert run.code == 0, run.err
    return run.out.splitlines()


REASON = "exit code 126: found but not executed (permission denied: not executable, or exec refused there)"


def test_reason_and_stderr_tail_under_the_calls(tmp_path):
    lines = steps(tmp_path, events({"error": REASON},
                                   {"exit_code": 126, "stderr_tail": "bash: ./x: Permission denied\nsecond line"}))
    at = lines.index("  0  tool_call    bash        4ms")  # upstream's row, then what it does not say
    assert lines[at + 1: at + 7] == [
        "     tool_call   bash  ✗ error  4ms  in 17 B  out 90 B",
        f"       error:  {REASON}",
        "     shell       /usr/bin/bash  exit 126  3ms  stdout 0 B  stderr 40 B",
        "       stderr: bash: ./x: Permission denied",
        "               second line",
        "  1  end_turn     —           —",
    ]


def test_without_tool_output_the_exit_code_still_says_what_it_means(tmp_path):
    """A guest's own shell call (no tool_call before it) or an older trace: the exit status's meaning."""
    lines = steps(tmp_path, events({}, {"exit_code": 127}))
    at = lines.index("     shell       /usr/bin/bash  exit 127  3ms  stdout 0 B  stderr 40 B")
    assert lines[at + 1] == "       means:  command not found"
    assert not any("stderr:" in line for line in lines)


def test_an_older_trace_with_tool_output_shows_its_summary_and_stderr(tmp_path):
    output = json.dumps({"status": "failed", "summary": "exit code 126",
                         "data": "out\n[stderr]\nbash: ./x: Permission denied\n"})
    trace = events({"output": output}, {"exit_code": 126})
    lines = steps(tmp_path, trace)
    at = lines.index("     tool_call   bash  ✗ error  4ms  in 17 B  out 90 B")
    assert lines[at + 1: at + 3] == ["       error:  exit code 126", "       stderr: bash: ./x: Permission denied"]

    run = mur("trace", "show", "--json", cwd=tmp_path)
    summary = json.loads(run.out)
    assert summary["tool_calls"]["calls"][0]["error"] == "exit code 126"
    assert summary["shell_calls"]["failures"] == [{
        "turn": 0, "binary": "/usr/bin/bash", "exit_code": 126, "meaning": failures.exit_meaning(126),
        "stderr_tail": "bash: ./x: Permission denied"}]


def test_show_lists_the_reason_under_the_call_and_in_the_timeline(tmp_path):
    write_trace(tmp_path / "workdir", SID, events({"error": "unknown tool 'bash'"}, None))
    run = mur("trace", "show", cwd=tmp_path)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    at = lines.index('  turn 0  bash 4ms ✗  {"command":"./x"}')
    assert lines[at + 1] == "      error: unknown tool 'bash'"
    assert any(line.endswith("""bash  4ms  ✗ unknown tool 'bash'  {"command":"./x"}""") for line in lines)


def test_exit_meanings_and_tails():
    assert failures.exit_meaning(137) == "killed by SIGKILL"
    assert failures.exit_meaning(1) is None and failures.exit_meaning("x") is None
    assert failures.shell_reason(124, "exit code 124", timed_out=True) == "exit code 124: timed out and was killed"
    assert failures.tail("\n".join(str(i) for i in range(30))) == "\n".join(str(i) for i in range(20, 30))
    long = failures.tail("x" * 5000)
    assert len(long) == failures.STDERR_CHARS and long.startswith("…")
    assert failures.tool_error({"status": "ok", "error": "x"}) is None
