"""murmur-hook-eval's scoring (examples/murmur-hook-eval/scoring.py), run on the host."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCORING = Path(__file__).resolve().parents[2] / "examples" / "murmur-hook-eval" / "scoring.py"
spec = importlib.util.spec_from_file_location("murmur_hook_eval_scoring", SCORING)
scoring = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scoring)

END = {"total_turns": 3, "total_input_tokens": 900, "total_output_tokens": 60, "exit_status": "ok"}


def config(*scorers, dataset_id=None):
    return json.dumps({"dataset_id": dataset_id, "scorers": list(scorers)})


def test_each_scorer_passes_and_fails():
    scorers = scoring.parse_scorers(config(
        {"type": "exit_ok", "name": "ok"},
        {"type": "max_turns", "name": "turns5", "max": 5},
        {"type": "max_turns", "name": "turns2", "max": 2},
        {"type": "max_tokens", "name": "tok", "max": 960},
        {"type": "tool_sequence", "name": "seq", "expected": ["greet", "bash"]},
        {"type": "tool_sequence", "name": "seq_partial", "expected": ["bash", "greet", "jq"]},
        {"type": "llm_judge", "name": "judge"},
    ))
    records, scores, overall = scoring.score_session(scorers, ["greet", "jq", "bash"], END, 7)
    result = {r["scorer"]: (r["result"], r["score"], r["reason"]) for r in records}
    assert result == {
        "ok": ("pass", 1.0, "exit_status=ok"),
        "turns5": ("pass", 1.0, "turns=3 max=5"),
        "turns2": ("fail", 0.0, "turns=3 max=2"),
        "tok": ("pass", 1.0, "tokens=960 max=960"),
        "seq": ("pass", 1.0, "observed=['greet', 'jq', 'bash'] expected=['greet', 'bash']"),
        "seq_partial": ("fail", pytest.approx(1 / 3), "observed=['greet', 'jq', 'bash'] expected=['bash', 'greet', 'jq']"),
    }
    assert "judge" not in scores and overall == "fail"
    assert all(r["record_type"] == "event_score" and r["ts"] == 7 and r["turn"] == 3 and r["event_type"] == "session_end"
               for r in records)


def test_exit_status_not_ok_fails_exit_ok():
    records, scores, overall = scoring.score_session([{"type": "exit_ok", "name": "ok"}], [],
                                                     {**END, "exit_status": "max_turns_reached"}, 1)
    assert (records[0]["result"], scores, overall) == ("fail", {"ok": 0.0}, "fail")


def test_only_llm_judge_is_no_scores():
    assert scoring.score_session([{"type": "llm_judge", "name": "j"}], [], END, 1) == ([], {}, "no_scores")


@pytest.mark.parametrize("raw,key,message", [
    ("{not json", "MURMUR_EVAL_CONFIG", "not valid JSON"),
    ("[]", "MURMUR_EVAL_CONFIG", "expected a JSON object, found an array"),
    ('{"dataset_id": "x"}', "scorers", "missing or not an array"),
    ('{"scorers": [{"type": "exit_ok"}, {"type": "exit_okay"}]}', "scorers[1].type", "unknown scorer type 'exit_okay'"),
    ('{"scorers": [{"name": "x"}]}', "scorers[0].type", "missing or not a string"),
    ('{"scorers": [{"type": "max_turns"}]}', "scorers[0].max", "requires a numeric 'max'"),
    ('{"scorers": [{"type": "tool_sequence", "expected": []}]}', "scorers[0].expected", "non-empty list"),
])
def test_config_errors_name_the_key(raw, key, message):
    with pytest.raises(scoring.ConfigError) as info:
        scoring.parse_scorers(raw)
    assert info.value.key == key and message in info.value.message


def test_eval_lines_end_with_exactly_one_dataset_run():
    records, scores, overall = scoring.score_session([{"type": "exit_ok", "name": "ok"}], [], END, 5)
    lines = [json.loads(x) for x in scoring.eval_lines(records, scores, overall, "ds", None, 5)]
    assert [x["record_type"] for x in lines] == ["event_score", "dataset_run"]
    assert lines[-1] == {"record_type": "dataset_run", "ts": 5, "dataset_id": "ds", "case_id": None,
                         "overall": "pass", "scores": {"ok": 1.0}}
    err = scoring.ConfigError("scorers", "missing or not an array")
    [run] = [json.loads(x) for x in scoring.eval_lines([], {}, "config_error", None, "c1", 5, err)]
    assert run["overall"] == "config_error" and run["config_error"] == {"key": "scorers",
                                                                        "message": "missing or not an array"}


def test_the_runtime_config_shape_parses(tmp_path):
    """What mur.hooks.launch.hook_env puts in MURMUR_EVAL_CONFIG is what the hook reads."""
    from mur.manifest import load_capsule
    from mur.hooks.launch import hook_env

    (tmp_path / "murmur.yaml").write_text(
        "name: c\nversion: '1'\nobservability:\n  eval:\n    dataset_id: ds\n    scorers:\n"
        "      - {type: max_turns, name: t, max: 4}\n      - {type: tool_sequence, name: s, expected: [greet]}\n")
    env = hook_env(load_capsule(tmp_path / "murmur.yaml").capsule, {"MURMUR_SESSION_ID": "ses_x"}, host_env={})
    assert env["MURMUR_DATASET_ID"] == "ds"
    assert scoring.parse_scorers(env["MURMUR_EVAL_CONFIG"]) == [
        {"type": "max_turns", "name": "t", "max": 4}, {"type": "tool_sequence", "name": "s", "expected": ["greet"]}]
