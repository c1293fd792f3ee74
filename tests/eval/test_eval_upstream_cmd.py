"""Upstream's `crates/murmur-cli/tests/eval_cmd.rs` expectations for `mur eval show|diff|run`, ported one
by one (its test name in each docstring) onto our own eval.jsonl files, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_events import mur


def score(ts: int, turn: int, scorer: str, result: str, value: float, reason: str) -> dict:
    return {"record_type": "event_score", "ts": ts, "turn": turn, "event_type": "session_end", "scorer": scorer,
            "result": result, "score": value, "reason": reason}


def dataset_run(ts: int, overall: str, scores: dict, dataset: str | None = "smoke", case: str | None = "c1") -> dict:
    return {"record_type": "dataset_run", "ts": ts, "dataset_id": dataset, "case_id": case, "overall": overall,
            "scores": scores}


# A: both scorers pass; B: max_tokens fails; as upstream's FIXTURE_A / FIXTURE_B with our scorers and numbers.
EVAL_A = [score(70, 4, "max_tokens", "pass", 1.0, "tokens=900 max=4000"),
          score(71, 4, "exit_ok", "pass", 1.0, "exit_status=ok"),
          dataset_run(72, "pass", {"max_tokens": 1.0, "exit_ok": 1.0})]
EVAL_B = [score(80, 9, "max_tokens", "fail", 0.0, "tokens=5200 max=4000"),
          score(81, 9, "exit_ok", "pass", 1.0, "exit_status=ok"),
          dataset_run(82, "fail", {"max_tokens": 0.0, "exit_ok": 1.0}, case="c2")]


def write(directory: Path, name: str, records: list[dict] | str) -> str:
    path = directory / name
    path.write_text(records if isinstance(records, str) else "".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def ok(*args: str, cwd: Path) -> str:
    run = mur(*args, cwd=cwd)
    assert (run.code, run.err) == (0, ""), run.err
    return run.out


# ── mur eval show ────────────────────────────────────────────────────────────


def test_show_pass_session(tmp_path: Path):
    """show_human_readable_pass_session"""
    lines = ok("eval", "show", write(tmp_path, "eval.jsonl", EVAL_A), cwd=tmp_path).splitlines()
    scorers = lines.index("── Scorers ─────────────────────────────────────")
    assert lines[scorers + 1: scorers + 3] == ["  exit_ok                  1/1 pass  (100.0%)",
                                               "  max_tokens               1/1 pass  (100.0%)"]
    assert "  result:  pass" in lines and "  (no failing events)" in lines


def test_show_fail_session(tmp_path: Path):
    """show_human_readable_fail_session"""
    lines = ok("eval", "show", write(tmp_path, "eval.jsonl", EVAL_B), cwd=tmp_path).splitlines()
    assert "  max_tokens               0/1 pass  (0.0%)" in lines and "  result:  fail" in lines
    worst = lines.index("── Worst events ─────────────────────────────────────")
    assert lines[worst + 1] == ("  turn   9  session_end   max_tokens               fail  score=0.00"
                                "  (tokens=5200 max=4000)")


@pytest.mark.parametrize("records, overall", [(EVAL_A, "pass"), (EVAL_B, "fail")])
def test_show_json(tmp_path: Path, records: list[dict], overall: str):
    """show_json_output_is_valid_json, show_json_fail_session_overall_fail, show_json_contains_scorer_names,
    show_json_pass_rate_fields_present"""
    doc = json.loads(ok("eval", "show", "--json", write(tmp_path, "eval.jsonl", records), cwd=tmp_path))
    assert doc["overall"] == overall
    assert set(doc["scorers"]) == {"max_tokens", "exit_ok"}
    tokens = doc["scorers"]["max_tokens"]
    assert (tokens["pass"], tokens["fail"], tokens["total"]) == ((1, 0, 1) if overall == "pass" else (0, 1, 1))
    assert tokens["pass_rate"] == (1.0 if overall == "pass" else 0.0)
    assert doc["dataset_run"] == records[-1]


def test_show_without_scores(tmp_path: Path):
    """show_no_scorer_events_handles_gracefully, show_empty_file_exits_success_with_no_scores_message,
    show_single_scorer_shows_pass_rate"""
    only_run = write(tmp_path, "run.jsonl", [dataset_run(90, "no_scores", {}, dataset=None, case=None)])
    lines = ok("eval", "show", only_run, cwd=tmp_path).splitlines()
    assert lines[1:] == ["", "── Scorers ─────────────────────────────────────", "",
                         "── Overall ─────────────────────────────────────", "  result:  no_scores"]
    assert ok("eval", "show", write(tmp_path, "empty.jsonl", ""), cwd=tmp_path).splitlines()[1] == \
        "  (no scored events)"
    single = write(tmp_path, "one.jsonl", [score(5, 1, "turn_limit", "pass", 1.0, "turns=1 max=3"),
                                           dataset_run(6, "pass", {"turn_limit": 1.0})])
    assert "  turn_limit               1/1 pass  (100.0%)" in ok("eval", "show", single, cwd=tmp_path)


def test_show_errors(tmp_path: Path):
    """show_missing_file_exits_nonzero, show_malformed_json_reports_line_number, show_unknown_record_type_fails"""
    run = mur("eval", "show", str(tmp_path / "none.jsonl"), cwd=tmp_path)
    assert run.code == 1 and run.err.startswith(f"error[E-IO-001]: eval file not found: {tmp_path / 'none.jsonl'}")
    bad = write(tmp_path, "bad.jsonl", json.dumps(EVAL_A[0]) + "\n{truncated\n")
    run = mur("eval", "show", bad, cwd=tmp_path)
    assert run.code == 1 and run.err.startswith(f"error[E-EVAL-001]: {bad}:2: ")
    odd = write(tmp_path, "odd.jsonl", '{"record_type":"case_note","ts":1}\n')
    run = mur("eval", "show", odd, cwd=tmp_path)
    assert run.code == 1 and run.err.startswith(f"error[E-EVAL-001]: {odd}:1: unknown record_type 'case_note'")


# ── mur eval diff ────────────────────────────────────────────────────────────


def test_diff_per_scorer(tmp_path: Path):
    """diff_shows_per_scorer_comparison, diff_delta_shows_which_run_scored_better"""
    lines = ok("eval", "diff", write(tmp_path, "a.jsonl", EVAL_A), write(tmp_path, "b.jsonl", EVAL_B),
               cwd=tmp_path).splitlines()
    at = lines.index("Scorer                   Run A          Run B          Delta")
    assert lines[at + 2: at + 4] == ["exit_ok                  100.0%         100.0%         =",
                                     "max_tokens               100.0%         0.0%           -100.0pp (A better)"]
    assert lines[-1] == "overall                  pass           fail           (A better)"


def test_diff_same_file_and_missing_file(tmp_path: Path):
    """diff_same_file_shows_equal_delta, diff_missing_file_exits_nonzero"""
    a = write(tmp_path, "a.jsonl", EVAL_A)
    lines = ok("eval", "diff", a, write(tmp_path, "a2.jsonl", EVAL_A), cwd=tmp_path).splitlines()
    assert lines[-4:] == ["exit_ok                  100.0%         100.0%         =",
                          "max_tokens               100.0%         100.0%         =", "",
                          "overall                  pass           pass           ="]
    run = mur("eval", "diff", a, str(tmp_path / "gone.jsonl"), cwd=tmp_path)
    assert run.code == 1 and run.err.startswith("error[E-IO-001]: eval file not found: ")


# ── mur eval run (argument defaults) ─────────────────────────────────────────


@pytest.fixture
def capsule(tmp_path: Path) -> Path:
    """upstream's write_minimal_manifest: a murmur.yaml with only name and version"""
    (tmp_path / "cap").mkdir()
    (tmp_path / "cap" / "murmur.yaml").write_text("name: eval-smoke\nversion: 0.2.0\n")
    return tmp_path / "cap"


def test_run_without_a_dataset(capsule: Path):
    """run_no_args_default_dataset_absent_gives_clear_error,
    run_explicit_capsule_only_default_dataset_absent_gives_clear_error"""
    expected = ("error[E-IO-001]: no dataset found. Expected ./eval.jsonl or specify with --dataset <path>\n"
                '  hint: write eval.jsonl here (a case a line: {"case_id", "task_path", "expected"?}) or pass --dataset PATH\n')
    assert (mur("eval", "run", cwd=capsule).err, mur("eval", "run", str(capsule), cwd=capsule.parent).err) == (
        expected, expected)
    # upstream reads ./eval.jsonl even when CAPSULE_DIR is given; one kept beside the capsule is named
    (capsule / "eval.jsonl").write_text('{"case_id": "a", "task_path": "t.md"}\n')
    err = mur("eval", "run", "cap", cwd=capsule.parent).err
    assert err.endswith("\n  hint: the capsule's folder has one: pass --dataset cap/eval.jsonl\n"), err


def test_run_with_a_missing_dataset(capsule: Path):
    """run_explicit_dataset_only_capsule_defaults_to_cwd, run_both_explicit_uses_given_paths"""
    missing = capsule.parent / "absent.jsonl"
    for run in (mur("eval", "run", "--dataset", str(missing), cwd=capsule),
                mur("eval", "run", str(capsule), "--dataset", str(missing), cwd=capsule.parent)):
        assert run.code == 1 and run.err.startswith(f"error[E-IO-001]: dataset not found at {missing}")
