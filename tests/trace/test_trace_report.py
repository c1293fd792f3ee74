"""`mur trace report`: several sessions aggregated, run as the real CLI on trace.jsonl files in a tmp workdir."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trace_events import agent_session, mur, sid, write_trace

MIN, HOUR, DAY = 60_000, 3_600_000, 86_400_000


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Four finished sessions started 3d, 5h, 90m and 10m ago, and a newest one whose trace is broken."""
    now = int(time.time() * 1000)
    root = tmp_path / "workdir"
    write_trace(root, sid(1), agent_session(sid(1), now - 3 * DAY, [[("bash", "ok", 40)]], "ok", 1000))
    write_trace(root, sid(2), agent_session(sid(2), now - 5 * HOUR, [[("bash", "error", 30)],
                                                                    [("read_file", "ok", 10)]], "failed", 2000))
    write_trace(root, sid(3), agent_session(sid(3), now - 90 * MIN, [[("bash", "ok", 20), ("read_file", "ok", 10)]],
                                            "ok", 1500))
    write_trace(root, sid(4), agent_session(sid(4), now - 10 * MIN, [[("bash", "error", 50)], [("bash", "ok", 30)],
                                                                     [("write_file", "ok", 15)]],
                                            "max_turns_reached", 4000))
    lines = [json.dumps(e) for e in agent_session(sid(5), now - MIN, [])]
    write_trace(root, sid(5), "\n".join(lines[:2] + ['{"event_type": "inference", "turn": 0,'] + lines[2:]) + "\n")
    return root


def report(workdir: Path, *args: str) -> tuple[dict, str]:
    run = mur("trace", "report", *args, "--json", "--workdir", str(workdir), cwd=workdir.parent)
    assert run.code == 0, run.err
    assert len(run.out.splitlines()) == 1
    return json.loads(run.out), run.err


def ids(doc: dict) -> list[str]:
    return [s["session_id"] for s in doc["sessions"]]


def test_all_sessions_by_default_and_the_broken_one_is_skipped(workdir: Path):
    doc, err = report(workdir)
    assert ids(doc) == [sid(1), sid(2), sid(3), sid(4)] and doc["count"] == 4
    assert err.startswith(f"note: skipped 1 incomplete session(s)\n  {sid(5)}: [E-TRC-001] ")  # upstream's note
    assert "line 3 is not valid JSON" in err
    assert [s["session"] for s in doc["skipped"]] == [sid(5)]
    assert list(doc["status"].items()) == [("ok", 2), ("failed", 1), ("max_turns_reached", 1)]
    m = doc["metrics"]
    assert m["turns"] == {"total": 11, "mean": 2.8, "min": 2, "max": 4}
    assert m["input_tokens"] == {"total": 12100, "mean": 3025.0, "min": 2100, "max": 4600}
    assert m["output_tokens"] == {"total": 660, "mean": 165.0, "min": 110, "max": 260}
    assert m["tool_calls"] == {"total": 8, "mean": 2.0, "min": 1, "max": 3}
    assert m["tool_errors"]["total"] == 2 and m["shell_calls"]["total"] == 5
    assert m["duration_ms"] == {"total": 8500, "mean": 2125.0, "min": 1000, "max": 4000}
    assert doc["tools"] == [
        {"tool": "bash", "calls": 5, "errors": 2, "error_rate": 0.4, "avg_ms": 34, "sessions": 4},
        {"tool": "read_file", "calls": 2, "errors": 0, "error_rate": 0.0, "avg_ms": 10, "sessions": 2},
        {"tool": "write_file", "calls": 1, "errors": 0, "error_rate": 0.0, "avg_ms": 15, "sessions": 1},
    ]


def test_human_report(workdir: Path):
    run = mur("trace", "report", cwd=workdir.parent)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0] == "Sessions: 4  (workdir)"
    assert [line.split()[0] for line in lines[3:7]] == [sid(1), sid(2), sid(3), sid(4)]
    assert lines[4].split()[3:] == ["failed", "3", "3,300", "180", "2", "1", "2.0s"]
    assert "turns                  11             2.8            2              4" in lines
    assert "input tokens           12,100         3,025.0        2,100          4,600" in lines
    assert "duration (ms)          8,500          2,125.0        1,000          4,000" in lines
    status = lines[lines.index("Exit status:") + 1:][:3]
    assert status == ["  ok                       2  (50.0%)", "  failed                   1  (25.0%)",
                      "  max_turns_reached        1  (25.0%)"]
    tools = lines[lines.index("Tool                    Calls  Errors  Error rate  Avg latency  Sessions") + 1:]
    assert tools == [
        "bash                        5       2       40.0%         34ms         4",
        "read_file                   2       0        0.0%         10ms         2",
        "write_file                  1       0        0.0%         15ms         1",
    ]
    assert "skipped" in run.err and sid(5) in run.err


@pytest.mark.parametrize("args, expected", [
    (["--since", "2h"], [3, 4]),
    (["--since", "6h"], [2, 3, 4]),
    (["--since", "1d"], [2, 3, 4]),
    (["--since", "4d"], [1, 2, 3, 4]),
    (["--since", "30m"], [4]),
    (["--last", "2"], [4]),             # the two newest directories; the newest is broken
    (["--last", "3"], [3, 4]),
    (["--last", "3", "--since", "1h"], [4]),
    (["--last", "9"], [1, 2, 3, 4]),
])
def test_last_and_since_narrow_the_set(workdir: Path, args: list[str], expected: list[int]):
    doc, _ = report(workdir, *args)
    assert ids(doc) == [sid(n) for n in expected]
    assert doc["count"] == len(expected)


def test_explicit_sessions(workdir: Path):
    doc, err = report(workdir, "@2", "0001")
    assert ids(doc) == [sid(1), sid(4)] and err == ""
    assert doc["status"] == {"ok": 1, "max_turns_reached": 1}
    doc, _ = report(workdir, "@2", "@2", "0004", sid(4))
    assert ids(doc) == [sid(4)]


def test_nothing_left_is_an_error(workdir: Path, tmp_path: Path):
    run = mur("trace", "report", "--since", "5m", cwd=workdir.parent)
    assert run.code == 1
    assert run.err.splitlines()[-2].startswith("error[E-TRC-002]: no session in workdir started within the last 5m")
    run = mur("trace", "report", "@1", cwd=workdir.parent)
    assert run.code == 1
    assert "error[E-TRC-001]: no complete sessions to report — all traces are empty or incomplete" in run.err
    (tmp_path / "empty").mkdir()
    run = mur("trace", "report", "--workdir", "empty", cwd=tmp_path)
    assert run.code == 1 and run.err.startswith("error[E-TRC-002]: no sessions found in workdir at empty")
    run = mur("trace", "report", "--workdir", "missing", cwd=tmp_path)
    assert run.code == 1 and run.err.startswith("error[E-IO-001]: workdir not found: missing")
    run = mur("trace", "report", "zzzz", cwd=workdir.parent)
    assert run.code == 1 and run.err.startswith("error[E-TRC-002]: no session found matching suffix 'zzzz'")
    assert "Traceback" not in run.err


@pytest.mark.parametrize("flag, args", [("--last", ["@1", "--last", "2"]), ("--since", ["0001", "--since", "1h"])])
def test_a_filter_with_explicit_sessions_is_upstreams_e_trc_002(workdir: Path, flag: str, args: list[str]):
    run = mur("trace", "report", *args, cwd=workdir.parent)
    assert (run.code, run.out) == (1, "")
    assert run.err == f"error[E-TRC-002]: {flag} cannot be combined with explicit session arguments\n"


@pytest.mark.parametrize("args, needle", [
    (["--last", "0"], "--last"),
    (["--since", "2 hours"], "is not a duration"),
    (["--since", "0h"], "is not a duration"),
    (["--since", "-1d"], "is not a duration"),
])
def test_usage_errors_exit_2(workdir: Path, args: list[str], needle: str):
    run = mur("trace", "report", *args, cwd=workdir.parent)
    assert run.code == 2 and run.out == ""
    assert needle in run.err and "Traceback" not in run.err
