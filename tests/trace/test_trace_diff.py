"""`mur trace diff`: two sessions compared, run as the real CLI on trace.jsonl files in a tmp workdir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_events import T0, agent_session, mur, sid, write_trace

# A (@2): 3 tool turns + end_turn, one bash error, compaction at turn 2, hit the turn cap.
A_TURNS = [[("read_file", "ok", 10)], [("bash", "ok", 40)], [("bash", "error", 30)]]
# B (@1): 2 tool turns + end_turn, no shell, no errors.
B_TURNS = [[("read_file", "ok", 20)], [("write_file", "ok", 50)]]

EXPECTED_TABLE = """\
Metric                 Run A            Run B            Delta
────────────────────── ──────────────── ──────────────── ──────────────────────────
turns                  4                3                -1 (B better)
duration               2.5s             1.2s             -1.3s (B better)
input tokens           4,600            3,300            -1300 (B better)
output tokens          260              180              -80 (B better)
input/turn (avg)       1150             1100             -50.0 (B better)
output/turn (avg)      65               60               -5.0 (B better)
tool calls             3                2                -1 (B better)
tool errors            1                0                -1 (B better)
tool success rate      66.7%            100.0%           +33.3 (B better)
avg tool latency       26ms             35ms             +9ms (A better)
skill calls            0                0                =
shell calls            2                0                -2 (B better)
avg shell latency      30ms             —                —
compaction             turn 2           none             changed
exit status            max_turns_reached ok               changed
"""

EXPECTED_TOOLS = """\
── Tool calls ───────────────────────────────────
Tool                   Run A            Run B            Delta
────────────────────── ──────────────── ──────────────── ──────────────────────────
bash                   2                0                -2  (removed)
read_file              1                1                =
write_file             0                1                +1  (added)

── Tool sequence (A → B) ────────────────────────
A: read_file → bash → bash
B: read_file → write_file
  = read_file
  - bash ×2
  + write_file
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "workdir"
    # the oldest session must not be picked by the defaults
    write_trace(root, sid(1), agent_session(sid(1), T0, [[("legacy_tool", "ok", 5)]] * 6, duration_ms=9000))
    write_trace(root, sid(2), agent_session(sid(2), T0 + 10_000, A_TURNS, "max_turns_reached", 2500,
                                            compaction_turn=2))
    write_trace(root, sid(3), agent_session(sid(3), T0 + 20_000, B_TURNS, "ok", 1200))
    return root


def test_default_compares_at2_with_at1(workdir: Path):
    run = mur("trace", "diff", cwd=workdir.parent)
    assert (run.code, run.err) == (0, ""), run.err
    head, rest = run.out.split("\n\n", 1)
    assert head.splitlines() == [
        f"Run A: {sid(2)}  ({Path('workdir') / sid(2) / 'trace.jsonl'})",
        f"Run B: {sid(3)}  ({Path('workdir') / sid(3) / 'trace.jsonl'})",
    ]
    table, tools = rest.split("\n\n", 1)
    assert table + "\n" == EXPECTED_TABLE
    assert tools == EXPECTED_TOOLS
    assert "legacy_tool" not in run.out


def test_explicit_addresses_swap_the_direction(workdir: Path):
    run = mur("trace", "diff", sid(3), "0002", "--workdir", str(workdir), cwd=workdir.parent.parent)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert "turns                  3                4                +1 (A better)" in lines
    assert "tool success rate      100.0%           66.7%            -33.3 (A better)" in lines
    assert "bash                   0                2                +2  (added)" in lines
    assert lines[-2:] == ["  - write_file", "  + bash ×2"]


def test_the_same_session_twice_is_all_equal(workdir: Path):
    run = mur("trace", "diff", "@1", "@1", cwd=workdir.parent)
    assert run.code == 0, run.err
    table = run.out.split("\n\n")[1].splitlines()[2:]
    assert [line.split()[-1] for line in table] == ["="] * 12 + ["—", "=", "="]  # avg shell latency: no shell calls
    assert run.out.splitlines()[-1] == "same sequence (2 calls)"


def test_json_is_one_line(workdir: Path):
    run = mur("trace", "diff", "--json", cwd=workdir.parent)
    assert run.code == 0 and len(run.out.splitlines()) == 1
    doc = json.loads(run.out)
    assert (doc["a"]["session_id"], doc["b"]["session_id"]) == (sid(2), sid(3))
    rows = {r["key"]: r for r in doc["metrics"]}
    assert (rows["turns"]["a"], rows["turns"]["b"], rows["turns"]["delta"], rows["turns"]["verdict"]) == (
        4, 3, -1, "B better")
    assert (rows["tool_avg_ms"]["delta"], rows["tool_avg_ms"]["verdict"]) == (9, "A better")
    assert (rows["shell_avg_ms"]["b"], rows["shell_avg_ms"]["verdict"]) == (None, None)
    assert (rows["status"]["a"], rows["status"]["b"], rows["status"]["verdict"]) == (
        "max_turns_reached", "ok", "changed")
    tools = doc["tools"]
    assert tools["a"] == ["read_file", "bash", "bash"] and tools["b"] == ["read_file", "write_file"]
    assert (tools["added"], tools["removed"], tools["same"]) == (["write_file"], ["bash"], False)
    assert [(o["op"], o["tool"]) for o in tools["ops"]] == [
        ("=", "read_file"), ("-", "bash"), ("-", "bash"), ("+", "write_file")]


@pytest.mark.parametrize("args, needle", [
    (["@1"], "mur trace diff expects 0 or 2 arguments, got 1"),  # upstream's words
    (["@1", "@4"], "after: @4 is out of range — workdir has 3 sessions"),
    (["@1", "aaaa"], "after: no session found matching suffix 'aaaa'"),
    (["ses_" + "f" * 32, "@1"], f"before: session ses_{'f' * 32} not found"),
])
def test_bad_addresses_are_e_trc_002(workdir: Path, args: list[str], needle: str):
    run = mur("trace", "diff", *args, cwd=workdir.parent)
    assert run.code == 1 and run.out == ""
    assert run.err.startswith("error[E-TRC-002]: ") and needle in run.err


def test_one_session_is_not_enough_for_the_default(tmp_path: Path):
    write_trace(tmp_path / "workdir", sid(1), agent_session(sid(1), T0, []))
    run = mur("trace", "diff", cwd=tmp_path)
    assert run.code == 1
    assert run.err.startswith("error[E-TRC-002]: before: @2 is out of range — workdir has 1 session\n")


def test_malformed_traces_are_e_trc_001(workdir: Path):
    (workdir / sid(2) / "trace.jsonl").write_text('{"event_type": "session_start"}\n[1, 2]\n')
    run = mur("trace", "diff", cwd=workdir.parent)
    assert run.code == 1 and run.err.startswith("error[E-TRC-001]: ") and "line 2" in run.err
    assert "Traceback" not in run.err
