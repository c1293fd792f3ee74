"""`mur eval show`: resolution, parsing (E-EVAL-001/002), summary and rendering."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mur.cli.main import build_app
from mur.errors import MurError
from mur.eval.file import load_eval, render, resolve_eval, summarize

OLD = "ses_019f01a940ce7761854e768ecbe3d399"
NEW = "ses_019f01a940ce7761854e768ecbe3e400"
SCORES = [
    {"record_type": "event_score", "ts": 1, "turn": 3, "event_type": "session_end", "scorer": "turn_limit",
     "result": "pass", "score": 1.0, "reason": "turns=3 max=5"},
    {"record_type": "event_score", "ts": 1, "turn": 3, "event_type": "session_end", "scorer": "tool_order",
     "result": "fail", "score": 0.5, "reason": "observed=['greet'] expected=['greet', 'bash']"},
]
RUN = {"record_type": "dataset_run", "ts": 1, "dataset_id": "ds-1", "case_id": "case_1", "overall": "fail",
       "scores": {"turn_limit": 1.0, "tool_order": 0.5}}


def write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def workdir(tmp_path):
    root = tmp_path / "workdir"
    write(root / OLD / "eval.jsonl", [SCORES[0], {**RUN, "overall": "pass", "scores": {"turn_limit": 1.0}}])
    write(root / NEW / "eval.jsonl", SCORES + [RUN])
    return root


def test_summary_json_shape(workdir):
    summary = summarize(*load_eval(resolve_eval(None, workdir)))
    assert summary == {
        "overall": "fail",
        "scorers": {"tool_order": {"pass": 0, "fail": 1, "total": 1, "pass_rate": 0.0},
                    "turn_limit": {"pass": 1, "fail": 0, "total": 1, "pass_rate": 1.0}},
        "dataset_run": RUN,
    }


def test_addresses(workdir, tmp_path):
    assert resolve_eval("@2", workdir).parent.name == OLD
    assert resolve_eval("d399", workdir).parent.name == OLD
    assert resolve_eval(NEW, workdir).parent.name == NEW
    assert resolve_eval(str(workdir / OLD), workdir) == workdir / OLD / "eval.jsonl"
    # mur run --workdir DIR: sessions under DIR/.murmur, the hook's eval.jsonl in DIR itself
    alt = tmp_path / "alt"
    (alt / ".murmur" / NEW).mkdir(parents=True)
    write(alt / "eval.jsonl", [RUN])
    assert resolve_eval(None, alt) == alt / "eval.jsonl"


def test_overall_without_dataset_run():
    assert summarize([], None)["overall"] == "no_scores"
    assert summarize(SCORES[:1], None)["overall"] == "pass"
    assert summarize(SCORES, None)["overall"] == "fail"


def err(fn, *args):
    with pytest.raises(MurError) as info:
        fn(*args)
    return info.value


def test_e_eval_002(tmp_path, workdir):
    assert err(resolve_eval, None, tmp_path / "nowhere").code == "E-EVAL-002"
    assert err(resolve_eval, "ffff", workdir).code == "E-EVAL-002"
    (workdir / "ses_019f01a940ce7761854e768ecbe3f500").mkdir()
    e = err(resolve_eval, "f500", workdir)
    assert e.code == "E-EVAL-002" and "no eval file for session" in e.message and "murmur-hook-eval" in e.hint


def test_e_eval_001_names_the_line(tmp_path):
    bad = tmp_path / "eval.jsonl"
    bad.write_text(json.dumps(SCORES[0]) + "\n{broken\n")
    e = err(load_eval, bad)
    assert e.code == "E-EVAL-001" and e.message.startswith(f"{bad}:2: not valid JSON")
    bad.write_text(json.dumps({"record_type": "mystery"}) + "\n")
    assert "unknown record_type 'mystery'" in err(load_eval, bad).message
    bad.write_text(json.dumps({"record_type": "event_score", "result": "pass"}) + "\n")
    assert err(load_eval, bad).message.endswith("event_score record has no string 'scorer'")


def test_render_sections(workdir):
    path = resolve_eval(None, workdir)
    scores, run = load_eval(path)
    text = render(summarize(scores, run), scores, path)
    assert text.splitlines()[0].startswith(f"── Eval: {path} ")
    for line in ("── Scorers", "  tool_order               0/1 pass  (0.0%)",
                 "  turn_limit               1/1 pass  (100.0%)", "  result:  fail", "  case:    case_1", "  dataset: ds-1", "── Score summary",
                 "  tool_order               0.5000", "── Worst events"):
        assert any(x.startswith(line) for x in text.splitlines()), line
    assert "tool_order               fail  score=0.50" in text
    empty = tmp = workdir / "empty.jsonl"
    tmp.write_text("")
    assert "(no scored events)" in render(summarize([], None), [], empty)


def test_cli_json_and_errors(workdir):
    runner = CliRunner()
    out = runner.invoke(build_app(), ["eval", "show", "--workdir", str(workdir), "--json"])
    assert out.exit_code == 0
    assert len(out.stdout.splitlines()) == 1 and json.loads(out.stdout)["overall"] == "fail"
    out = runner.invoke(build_app(), ["eval", "show", "@2", "--workdir", str(workdir)])
    assert out.exit_code == 0 and "result:  pass" in out.stdout


def test_cli_error_rendering(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "mur", "eval", "show", "--workdir", str(tmp_path / "none")],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error[E-EVAL-002]: no sessions found in workdir at ")


def test_an_eval_file_that_is_a_link_is_refused_with_e_io_002(tmp_path):
    """The hook writes eval.jsonl where tools can write: a symlink planted there is not followed."""
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps(SCORES[0]) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "eval.jsonl").symlink_to(secret)
    e = err(load_eval, work / "eval.jsonl")
    assert e.code == "E-IO-002" and e.message.startswith(f"refused to read {work / 'eval.jsonl'}")
    assert load_eval(secret)[0] == [SCORES[0]]  # the control: the file itself reads
