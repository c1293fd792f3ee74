"""`mur trace report`: several sessions aggregated, run as the real CLI on trace.jsonl files in a tmp workdir."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trace_events import agent_session, mur, sid_at, write_trace

MIN, HOUR, DAY = 60_000, 3_600_000, 86_400_000
NOW = int(time.time() * 1000)
AGO = {1: 3 * DAY, 2: 5 * HOUR, 3: 90 * MIN, 4: 10 * MIN, 5: MIN}


def sid(n: int) -> str:
    """Session n of the workdir below, its id made when it started (`--since` reads the id, as upstream)."""
    return sid_at(NOW - AGO[n], n)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """Four finished sessions started 3d, 5h, 90m and 10m ago, and a newest one whose trace is broken."""
    root = tmp_path / "workdir"
    write_trace(root, sid(1), agent_session(sid(1), NOW - AGO[1], [[("bash", "ok", 40)]], "ok", 1000))
    write_trace(root, sid(2), agent_session(sid(2), NOW - AGO[2], [[("bash", "error", 30)],
                                                                  [("read_file", "ok", 10)]], "failed", 2000))
    write_trace(root, sid(3), agent_session(sid(3), NOW - AGO[3], [[("bash", "ok", 20), ("read_file", "ok", 10)]],
                                            "ok", 1500))
    write_trace(root, sid(4), agent_session(sid(4), NOW - AGO[4], [[("bash", "error", 50)], [("bash", "ok", 30)],
                                                                   [("write_file", "ok", 15)]],
                                            "max_turns_reached", 4000))
    lines = [json.dumps(e) for e in agent_session(sid(5), NOW - AGO[5], [])]
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
    assert list(doc["status"].items()) == [("failed", 1), ("max_turns_reached", 1), ("ok", 2)]  # by name
    m = doc["metrics"]
    assert m["turns"] == {"total": 11, "mean": 2.75, "stddev": pytest.approx(0.829, abs=1e-3), "min": 2, "max": 4}
    assert m["input_tokens"] == {"total": 12100, "mean": 3025.0, "stddev": pytest.approx(1032.9, abs=0.1),
                                 "min": 2100, "max": 4600}
    assert (m["output_tokens"]["total"], m["output_tokens"]["mean"]) == (660, 165.0)
    assert (m["tool_calls"]["total"], m["tool_calls"]["mean"], m["tool_calls"]["max"]) == (8, 2.0, 3)
    assert m["tool_success_pct"]["mean"] == pytest.approx((100 + 50 + 100 + 200 / 3) / 4)
    assert m["tool_errors"]["total"] == 2 and m["shell_calls"]["total"] == 5 and m["redundant_calls"]["total"] == 0
    assert m["duration_ms"]["mean"] == 2125.0 and m["duration_ms"]["stddev"] == pytest.approx(1138.8, abs=0.1)
    assert doc["tasks"]["count"] == 0  # one task a session: no per-task averages
    assert doc["tools"] == [
        {"tool": "bash", "calls": 5, "errors": 2, "error_rate": 0.4, "avg_ms": 34, "sessions": 4},
        {"tool": "read_file", "calls": 2, "errors": 0, "error_rate": 0.0, "avg_ms": 10, "sessions": 2},
        {"tool": "write_file", "calls": 1, "errors": 0, "error_rate": 0.0, "avg_ms": 15, "sessions": 1},
    ]
    second = doc["sessions"][1]
    assert (second["tool_ok"], second["tool_errors"], second["tool_avg_ms"], second["shell_avg_ms"]) == (1, 1, 20, 25)


def test_human_report(workdir: Path):
    run = mur("trace", "report", cwd=workdir.parent)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    # upstream's per-session blocks, oldest first, each with mur's full id and status
    heads = [line for line in lines if line.startswith("Session ")]
    assert heads == [f"Session {sid(1)[:12]}...  1.0s  2 turns", f"Session {sid(2)[:12]}...  2.0s  3 turns",
                     f"Session {sid(3)[:12]}...  1.5s  2 turns", f"Session {sid(4)[:12]}...  4.0s  4 turns"]
    at = lines.index(heads[1])
    # started: the session_start event's time, 1 ms after t0 (a NOW ending in .999 is the next second)
    assert lines[at + 1: at + 8] == [
        "",
        f"  Id:            {sid(2)}",
        f"  Status:        failed  (started {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime((NOW - AGO[2] + 1) / 1000))} UTC)",
        "  Tool calls:    2  (1 ok, 1 error)",
        "  Shell calls:   1  exit codes: 1 ok",
        "  Avg latency:   tool 20ms  shell 25ms",
        "",
    ]
    assert "  Tool calls:    1" in lines  # no error count when nothing failed
    assert f"Sessions: 4  (workdir)" in lines
    table = lines[lines.index("Metric                 Mean           StdDev         Min            Max") + 2:][:10]
    assert table == [
        "turns                  2.8            0.8            2.0            4.0",
        "duration (ms)          2,125          1,138          1,000          4,000",
        "input tokens           3,025          1,032          2,100          4,600",
        "output tokens          165            61             110            260",
        "tool calls             2.0            0.7            1.0            3.0",
        "tool success (%)       79.2           21.7           50.0           100.0",
        "shell calls            1.2            0.4            1.0            2.0",
        "redundant calls        0.0            0.0            0.0            0.0",
        "tool errors            0.5            0.5            0.0            1.0",
        "skill calls            0.0            0.0            0.0            0.0",
    ]
    status = lines[lines.index("Exit status:") + 1:][:3]
    assert status == ["  failed                   1  (25.0%)", "  max_turns_reached        1  (25.0%)",
                      "  ok                       2  (50.0%)"]
    assert "Per-task averages" not in run.out
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
    assert ids(doc) == [sid(4), sid(1)] and err == ""  # in the order given, as upstream
    assert doc["status"] == {"max_turns_reached": 1, "ok": 1}
    doc, _ = report(workdir, "@2", "@2", "0004", sid(4))
    assert ids(doc) == [sid(4)]


def test_nothing_left_is_an_error(workdir: Path, tmp_path: Path):
    run = mur("trace", "report", "--since", "30s", cwd=workdir.parent)
    assert run.code == 1
    assert run.err.splitlines()[-2] == "error[E-TRC-002]: no sessions matched --since 30s in workdir at workdir"
    assert run.err.splitlines()[-1] == "  hint: 5 older session(s) there; widen --since"
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
    assert run.err == (f"error[E-TRC-002]: {flag} cannot be combined with explicit session arguments\n"
                       "  hint: give either sessions or the filter\n")


def test_last_zero_is_upstreams_e_trc_002(workdir: Path):
    run = mur("trace", "report", "--last", "0", cwd=workdir.parent)
    assert (run.code, run.out, run.err) == (1, "", "error[E-TRC-002]: --last must be at least 1\n  hint: e.g. --last 5\n")


@pytest.mark.parametrize("value", ["2 hours", "0h", "-1d", "1w"])
def test_a_bad_since_is_upstreams_e_trc_002(workdir: Path, value: str):
    run = mur("trace", "report", "--since", value, cwd=workdir.parent)
    assert (run.code, run.out) == (1, "")
    assert run.err == (f"error[E-TRC-002]: unrecognised --since format '{value}' — expected <N>m, <N>h, or <N>d\n"
                       "  hint: also <N>s; e.g. 30m, 2h, 1d\n")
