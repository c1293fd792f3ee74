"""`mur trace steps`: the session turn by turn, run as the real CLI on trace.jsonl files in a tmp workdir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_events import SID, T0, agent_session, mur, session_events, sid, write_trace


def traced_events() -> list[dict]:
    """The two-task session, plus a traced tool output, a hook's inference and an unknown turn-level event."""
    events = session_events()
    events[4]["output"] = "total 0\nfoo"
    extra = [
        {"event_type": "inference", "session_id": SID, "timestamp": T0 + 405, "turn": 1, "input_tokens": 40,
         "output_tokens": 5, "decision": "text", "tool_name": None, "origin": "hook:judge", "model": "claude-y"},
        {"event_type": "call_denied", "session_id": SID, "timestamp": T0 + 406, "turn": 1, "event": "on-shell",
         "hook_name": "policy", "target": "/usr/bin/rm", "reason": "nope"},
    ]
    return events[:8] + extra + events[8:]


EXPECTED = """\
Session ses_019f01a940ce7761854e768ecbe3d399  (3 turns)  failed  557ms

task tsk_1  (a2a)
  0  tool_call    bash        70ms
  1  end_turn     —           —
     compaction  9,000 → 800 tokens
     inference   text  in 40  out 5  (hook:judge)
     call_denied event=on-shell  hook_name=policy  target=/usr/bin/rm  reason=nope
  end  ok  2 turns  408ms

task tsk_2  (a2a)
  0  tool_call    nope        1ms
     tool_call   nope  ✗ error  1ms  in 2 B  out 50 B
  end  failed  1 turn  149ms
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "workdir"
    write_trace(root, sid(1), agent_session(sid(1), T0, [[("read_file", "ok", 10)]]))
    write_trace(root, SID, traced_events())  # sorts after sid(1): the most recent session
    return root


def test_steps_lists_each_turn_with_its_calls(workdir: Path):
    run = mur("trace", "steps", cwd=workdir.parent)
    assert (run.code, run.err) == (0, "")
    assert run.out == EXPECTED


def test_verbose_adds_inputs_outputs_and_commands(workdir: Path):
    run = mur("trace", "steps", "d399", "--verbose", "--workdir", str(workdir), cwd=workdir.parent.parent)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    # upstream's row gains the first string of the input, quoted and cut at 60 characters
    assert lines[3] == '  0  tool_call    bash        70ms    "ls -la ' + "x" * 53 + '…"'
    at = lines.index("     tool_call   bash  ✓ ok  70ms  in 321 B  out 40 B")
    assert lines[at + 1] == '       input:  {"command":"ls -la ' + "x" * 41 + "…"
    assert lines[at + 2] == '       output: "total 0\\nfoo"'
    assert lines[at + 3] == "     shell       /usr/bin/bash  exit 0  50ms  stdout 30 B  stderr 0 B"
    assert lines[at + 4] == "       $ ls -la " + "x" * 53 + "…"
    assert lines[lines.index("     tool_call   nope  ✗ error  1ms  in 2 B  out 50 B") + 1] == "       input:  {}"
    plain = mur("trace", "steps", "d399", "--workdir", str(workdir), cwd=workdir.parent).out
    assert "input:" not in plain and "output:" not in plain and "$ ls" not in plain


def test_json_is_one_line_with_turns_and_calls(workdir: Path):
    run = mur("trace", "steps", "--json", cwd=workdir.parent)
    assert run.code == 0 and len(run.out.splitlines()) == 1
    doc = json.loads(run.out)
    assert (doc["session_id"], doc["status"], doc["turns"], doc["tasks"]) == (SID, "failed", 3, 2)
    assert doc["trace"] == str(Path("workdir") / SID / "trace.jsonl")
    first, second = doc["attempts"]
    assert (first["task_id"], first["status"], first["duration_ms"]) == ("tsk_1", "ok", 408)
    assert [t["turn"] for t in first["turns"]] == [0, 1]
    turn0 = first["turns"][0]
    assert (turn0["decision"], turn0["tool_name"], turn0["input_tokens"], turn0["output_tokens"]) == (
        "tool_call", "bash", 100, 20)
    assert turn0["events"] == [
        {"kind": "tool_call", "name": "bash", "status": "ok", "duration_ms": 70, "input_bytes": 321,
         "output_bytes": 40},
        {"kind": "shell", "binary": "/usr/bin/bash", "exit_code": 0, "duration_ms": 50, "stdout_bytes": 30,
         "stderr_bytes": 0},
    ]
    assert [e["kind"] for e in first["turns"][1]["events"]] == ["compaction", "inference", "call_denied"]
    assert second["turns"][0]["events"][0]["status"] == "error"
    verbose = json.loads(mur("trace", "steps", "--json", "--verbose", cwd=workdir.parent).out)
    call = verbose["attempts"][0]["turns"][0]["events"][0]
    assert call["input"]["command"].startswith("ls -la ") and call["output"] == "total 0\nfoo"


def test_an_older_session_by_ordinal(workdir: Path):
    run = mur("trace", "steps", "@2", cwd=workdir.parent)
    assert run.code == 0, run.err
    assert run.out.splitlines() == [f"Session {sid(1)}  (2 turns)  ok  1.0s", "", "task tsk_cbe30001  (task_md)",
                                    "  0  tool_call    read_file   10ms", "  1  end_turn     —           —",
                                    "  end  ok  2 turns  1.0s"]


@pytest.mark.parametrize("address", ["@3", "@0", "zzzz", "abc"])
def test_bad_addresses_are_e_trc_002(workdir: Path, address: str):
    run = mur("trace", "steps", address, cwd=workdir.parent)
    assert run.code == 1 and run.out == ""
    assert run.err.startswith("error[E-TRC-002]: ") and "Traceback" not in run.err


def test_malformed_and_incomplete_traces_are_e_trc_001(workdir: Path):
    lines = [json.dumps(e) for e in session_events()]
    write_trace(workdir, sid(2), "\n".join(lines[:3] + ["{not json"] + lines[3:]) + "\n")
    run = mur("trace", "steps", "0002", cwd=workdir.parent)
    assert run.code == 1 and run.err.startswith("error[E-TRC-001]: ") and "line 4" in run.err
    write_trace(workdir, sid(2), [e for e in session_events() if e["event_type"] != "session_end"])
    run = mur("trace", "steps", "0002", cwd=workdir.parent)
    assert run.code == 1 and "no session_end event found" in run.err and "Traceback" not in run.err


def test_wrongly_typed_fields_do_not_break_it(workdir: Path):
    events = agent_session(sid(3), T0, [[("bash", "ok", 20)]])
    call = next(e for e in events if e["event_type"] == "tool_call")
    call.update(turn="x", duration_ms="slow", tool_name={"not": "a name"}, status=5)
    next(e for e in events if e["event_type"] == "shell").update(command=["ls", "-l"], exit_code=None)
    write_trace(workdir, sid(3), events)
    run = mur("trace", "steps", "0003", "-v", cwd=workdir.parent)
    assert run.code == 0, run.err
    assert "     tool_call   {'not': 'a name'}  ✗ 5  0ms  in 13 B  out 100 B" in run.out
    assert "       $ ls -l" in run.out
