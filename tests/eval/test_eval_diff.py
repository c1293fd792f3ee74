"""`mur eval diff`: two sessions' eval.jsonl compared, run as the real CLI on files in a tmp workdir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_events import mur, sid


def score(scorer: str, result: str, turn: int = 2, event_type: str = "session_end") -> dict:
    return {"record_type": "event_score", "ts": 1_760_000_000_000 + turn, "turn": turn, "event_type": event_type,
            "scorer": scorer, "result": result, "score": 1.0 if result == "pass" else 0.0, "reason": f"{scorer}"}


def dataset_run(overall: str, scores: dict) -> dict:
    return {"record_type": "dataset_run", "ts": 1_760_000_000_100, "dataset_id": "ds-1", "case_id": "case_1",
            "overall": overall, "scores": scores}


def write_eval(root: Path, session_id: str, records: list[dict] | str) -> Path:
    d = root / session_id
    d.mkdir(parents=True, exist_ok=True)
    text = records if isinstance(records, str) else "".join(json.dumps(r) + "\n" for r in records)
    (d / "eval.jsonl").write_text(text)
    return d / "eval.jsonl"


# A (@2): exit_ok fails, tool_sequence 1 of 2, llm_judge only here; B (@1): everything better but
# tool_sequence (1 of 3), max_tokens only here.
A = [score("exit_ok", "fail"), score("max_turns", "pass"), score("tool_sequence", "pass", 1, "tool_call"),
     score("tool_sequence", "fail", 2, "tool_call"), score("llm_judge", "pass"),
     dataset_run("fail", {"exit_ok": 0.0, "max_turns": 1.0, "tool_sequence": 0.5, "llm_judge": 1.0})]
B = [score("exit_ok", "pass"), score("max_turns", "pass"), score("max_tokens", "pass"),
     score("tool_sequence", "fail", 1, "tool_call"), score("tool_sequence", "fail", 2, "tool_call"),
     score("tool_sequence", "pass", 3, "tool_call"),
     dataset_run("pass", {"exit_ok": 1.0, "max_turns": 1.0, "max_tokens": 1.0, "tool_sequence": 0.33})]

EXPECTED = """\
Scorer                   Run A          Run B          Delta
──────────────────────── ────────────── ────────────── ──────────────────────────
exit_ok                  0.0%           100.0%         +100.0pp (B better)
llm_judge                100.0%         —              (A only)
max_tokens               —              100.0%         (B only)
max_turns                100.0%         100.0%         =
tool_sequence            50.0%          33.3%          -16.7pp (A better)

overall                  fail           pass           (B better)
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "workdir"
    write_eval(root, sid(1), [score("exit_ok", "pass"), dataset_run("pass", {"exit_ok": 1.0})])  # never a default
    write_eval(root, sid(2), A)
    write_eval(root, sid(3), B)
    return root


def test_default_compares_at2_with_at1(workdir: Path):
    run = mur("eval", "diff", cwd=workdir.parent)
    assert (run.code, run.err) == (0, "")
    head, table = run.out.split("\n\n", 1)
    assert head.splitlines() == [f"Run A: {Path('workdir') / sid(2) / 'eval.jsonl'}",
                                 f"Run B: {Path('workdir') / sid(3) / 'eval.jsonl'}"]
    assert table == EXPECTED


def test_swapped_runs_flip_the_deltas(workdir: Path):
    run = mur("eval", "diff", "0003", sid(2), "--workdir", str(workdir), cwd=workdir.parent.parent)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert "exit_ok                  100.0%         0.0%           -100.0pp (A better)" in lines
    assert "llm_judge                —              100.0%         (B only)" in lines
    assert "tool_sequence            33.3%          50.0%          +16.7pp (B better)" in lines
    assert lines[-1] == "overall                  pass           fail           (A better)"


def test_json_is_one_line(workdir: Path):
    run = mur("eval", "diff", "@2", "@1", "--json", cwd=workdir.parent)
    assert run.code == 0 and len(run.out.splitlines()) == 1
    doc = json.loads(run.out)
    assert doc["overall"] == {"a": "fail", "b": "pass", "verdict": "B better"}
    rows = {r["scorer"]: r for r in doc["scorers"]}
    assert list(rows) == ["exit_ok", "llm_judge", "max_tokens", "max_turns", "tool_sequence"]
    assert (rows["exit_ok"]["a"], rows["exit_ok"]["b"], rows["exit_ok"]["delta_pp"]) == (0.0, 1.0, 100.0)
    assert (rows["tool_sequence"]["delta_pp"], rows["tool_sequence"]["verdict"]) == (-16.7, "A better")
    assert (rows["llm_judge"]["b"], rows["llm_judge"]["verdict"]) == (None, "A only")
    assert rows["max_turns"]["verdict"] == "="


def test_paths_and_equal_runs(workdir: Path, tmp_path: Path):
    other = write_eval(tmp_path / "elsewhere", "copy", A)
    run = mur("eval", "diff", str(workdir / sid(2) / "eval.jsonl"), str(other), cwd=tmp_path)
    assert run.code == 0, run.err
    rows = run.out.split("\n\n")[1].splitlines()[2:]
    assert [r.split()[-1] for r in rows] == ["=", "=", "=", "="]
    assert run.out.splitlines()[-1] == "overall                  fail           fail           ="


def test_no_scores_on_either_side(tmp_path: Path):
    root = tmp_path / "workdir"
    write_eval(root, sid(1), "")
    write_eval(root, sid(2), [dataset_run("no_scores", {})])
    run = mur("eval", "diff", cwd=tmp_path)
    assert run.code == 0, run.err
    assert "(no scored events in either run)" in run.out
    assert run.out.splitlines()[-1] == "overall                  no_scores      no_scores      ="


@pytest.mark.parametrize("args, code, needle", [
    (["@1"], "E-EVAL-002", "takes two session addresses"),
    (["@1", "@4"], "E-EVAL-002", "@4 is out of range"),
    (["zzzz", "@1"], "E-EVAL-002", "no session found matching suffix 'zzzz'"),
    (["@1", "nowhere/eval.jsonl"], "E-IO-001", "eval file not found: nowhere/eval.jsonl"),
])
def test_bad_addresses(workdir: Path, args: list[str], code: str, needle: str):
    run = mur("eval", "diff", *args, cwd=workdir.parent)
    assert run.code == 1 and run.out == ""
    assert run.err.startswith(f"error[{code}]: ") and needle in run.err


def test_a_session_without_eval_file_and_a_malformed_one(workdir: Path):
    (workdir / sid(4)).mkdir()
    run = mur("eval", "diff", "@2", "@1", cwd=workdir.parent)
    assert run.code == 1 and run.err.startswith(f"error[E-EVAL-002]: no eval file for session {sid(4)}")
    write_eval(workdir, sid(4), json.dumps(score("exit_ok", "pass")) + "\n{truncated\n")
    run = mur("eval", "diff", "@2", "@1", cwd=workdir.parent)
    assert run.code == 1 and run.err.startswith("error[E-EVAL-001]: ")
    assert "eval.jsonl:2: not valid JSON" in run.err
    write_eval(workdir, sid(4), json.dumps({"record_type": "event_score", "scorer": 3, "result": "pass"}) + "\n")
    run = mur("eval", "diff", "@2", "@1", cwd=workdir.parent)
    assert run.code == 1 and "has no string 'scorer'" in run.err and "Traceback" not in run.err
