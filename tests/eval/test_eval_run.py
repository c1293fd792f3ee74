"""`mur eval run` before anything runs: the dataset file, the capsule's eval declarations, the case
workdirs, and the summary text. (A real capsule run over a dataset: integration/hooks/test_eval_run.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mur.errors import MurError
from mur.eval.run import (
    CaseResult,
    EvalRun,
    case_dirs,
    check_fresh,
    dataset_id_for,
    eval_scope,
    read_dataset,
    render_case_result,
    render_summary,
)
from mur.manifest.load import parse_capsule

from trace_events import mur


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def refused(path: Path) -> MurError:
    with pytest.raises(MurError) as info:
        read_dataset(path)
    return info.value


# --- dataset ---------------------------------------------------------------------------------------


def test_dataset_lines_become_cases_with_task_paths_relative_to_the_dataset(tmp_path):
    ds = write(tmp_path / "sets" / "smoke.jsonl",
               '{"case_id": "a", "task_path": "tasks/a.md", "expected": {"answer": 42}}\n'
               "\n   \n"
               '{"case_id": "b", "task_path": "/abs/b.md", "extra": "ignored"}\n'
               '{"case_id": "c", "task_path": ""}\n')
    cases = read_dataset(ds)
    assert [(c.case_id, c.line) for c in cases] == [("a", 1), ("b", 4), ("c", 5)]
    assert cases[0].task_path == tmp_path / "sets" / "tasks" / "a.md"
    assert cases[0].expected == {"answer": 42}
    assert cases[1].task_path == Path("/abs/b.md")
    assert (cases[2].task_ref, cases[2].task_path) == ("", None)


@pytest.mark.parametrize(
    "lines, message",
    [
        ('{"case_id": "a", "task_path": "a.md"}\n{"case_id": "b", "task_path": }\n',
         ":2: not valid JSON: Expecting value"),
        ('\n\n["a", "a.md"]\n', ":3: a dataset line must be a JSON object"),
        ('{"task_path": "a.md"}\n', ":1: missing or empty 'case_id' (a non-empty string)"),
        ('{"case_id": "ok", "task_path": "a.md"}\n{"case_id": "  ", "task_path": "a.md"}\n',
         ":2: missing or empty 'case_id' (a non-empty string)"),
        ('{"case_id": 7, "task_path": "a.md"}\n', ":1: missing or empty 'case_id' (a non-empty string)"),
        ('{"case_id": "a"}\n', ":1: missing 'task_path' (a string: a path relative to the dataset file)"),
        ('{"case_id": "a", "task_path": "a.md"}\n\n{"case_id": "a", "task_path": "b.md"}\n',
         ":3: duplicate case_id 'a' (first on line 1)"),
    ],
)
def test_a_bad_dataset_line_is_refused_with_its_line_number(tmp_path, lines, message):
    ds = write(tmp_path / "d.jsonl", lines)
    err = refused(ds)
    assert err.code == "E-EVAL-001"
    assert err.message.startswith(f"{ds}{message}")


def test_a_missing_or_empty_dataset_is_refused(tmp_path):
    err = refused(tmp_path / "nope.jsonl")
    assert (err.code, err.message) == ("E-IO-001", f"dataset not found at {tmp_path / 'nope.jsonl'}")
    err = refused(write(tmp_path / "empty.jsonl", "\n  \n"))
    assert (err.code, err.message) == ("E-IO-003", f"dataset is empty: {tmp_path / 'empty.jsonl'}")
    err = refused(tmp_path)
    assert err.code == "E-IO-003" and "is a directory" in err.message


# --- the capsule's eval declarations ---------------------------------------------------------------

HOOK = "  - {name: murmur-hook-eval, runtime: hook, source: ./h, local_source: true%s}\n"
SCORERS = "observability:\n  eval:\n%s    scorers:\n      - {type: exit_ok, name: ok}\n"


def capsule(hook: str | None = HOOK % ", capabilities: {filesystem: {scope: .}}", scorers: bool = True,
            dataset_id: str | None = None):
    text = "name: c\nversion: '0.1.0'\nartifacts:\n  - {name: greet, runtime: tool, source: ./g, local_source: true}\n"
    if hook is not None:
        text += hook
    if scorers:
        text += SCORERS % (f"    dataset_id: {dataset_id}\n" if dataset_id else "")
    return parse_capsule(text)


def test_the_capsule_must_declare_the_eval_hook_its_grant_and_scorers():
    assert eval_scope(capsule()) == "."
    assert eval_scope(capsule(HOOK % ", capabilities: {filesystem: {scope: scores}}")) == "scores"
    cases = [
        (capsule(hook=None), "murmur.yaml: mur eval run needs a 'murmur-hook-eval' artifact with runtime: hook"),
        (capsule(HOOK % ", capabilities: {filesystem: {scope: .}}", scorers=False),
         "murmur.yaml: missing required field 'observability.eval.scorers'"),
        (capsule(HOOK % ""), "murmur.yaml: missing required field 'artifacts[1].capabilities.filesystem.scope'"),
    ]
    for loaded, message in cases:
        with pytest.raises(MurError) as info:
            eval_scope(loaded)
        assert info.value.code == "E-MAN-001"
        assert info.value.message.startswith(message)
        assert info.value.hint


def test_the_dataset_id_is_the_manifest_one_else_the_dataset_file_stem():
    assert dataset_id_for(capsule(dataset_id="nightly"), Path("/x/smoke.jsonl")) == "nightly"
    assert dataset_id_for(capsule(), Path("/x/smoke.jsonl")) == "smoke"


# --- case workdirs ---------------------------------------------------------------------------------


def test_each_case_gets_its_own_file_name_safe_directory(tmp_path):
    ds = write(tmp_path / "d.jsonl", "".join(json.dumps({"case_id": c, "task_path": ""}) + "\n"
                                             for c in ("a/b", "a b", "..", "Case-1", "case-1")))
    dirs = case_dirs(tmp_path / "root", read_dataset(ds))
    assert [d.name for d in dirs] == ["a_b", "a_b-2", "case", "Case-1", "case-1-2"]
    assert all(d.parent == tmp_path / "root" for d in dirs)


def test_a_case_directory_that_already_holds_files_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    check_fresh([tmp_path / "new", tmp_path / "empty"])
    write(tmp_path / "used" / "task.md", "old")
    with pytest.raises(MurError) as info:
        check_fresh([tmp_path / "new", tmp_path / "used"])
    assert (info.value.code, info.value.message) == (
        "E-IO-003", f"case workdir {tmp_path / 'used'} already exists and is not empty")


# --- what the user reads ---------------------------------------------------------------------------


def test_the_case_lines_and_the_summary():
    run = EvalRun(Path("/d/smoke.jsonl"), "smoke", Path("/w"), [
        CaseResult("greets", "pass", Path("/w/greets"), "ses_1", {"seq": 1.0, "ok": 1.0}),
        CaseResult("broken", "fail", Path("/w/broken"), "ses_2", {"ok": 0.0, "seq": 0.5}),
        CaseResult("nostart", "stage_failed", Path("/w/nostart"), error="error[E-RUN-010]: port taken"),
    ])
    assert render_case_result(run.cases[0]) == "    result: pass  session: ses_1"
    assert render_case_result(run.cases[2]) == "    result: stage_failed"
    assert render_summary(run).splitlines() == [
        "",
        "── Summary ──────────────────────────────────────",
        "pass: 1/3",
        "",
        "  greets                   pass  ok=1.00 seq=1.00  (/w/greets)",
        "  broken                   fail  ok=0.00 seq=0.50  (/w/broken)",
        "  nostart                  stage_failed    (/w/nostart)",
    ]
    assert run.as_json() == {
        "dataset": "/d/smoke.jsonl", "dataset_id": "smoke", "pass": 1, "total": 3,
        "cases": [
            {"case_id": "greets", "result": "pass", "session_id": "ses_1", "workdir": "/w/greets",
             "scores": {"seq": 1.0, "ok": 1.0}},
            {"case_id": "broken", "result": "fail", "session_id": "ses_2", "workdir": "/w/broken",
             "scores": {"ok": 0.0, "seq": 0.5}},
            {"case_id": "nostart", "result": "stage_failed", "session_id": None, "workdir": "/w/nostart",
             "scores": {}},
        ],
    }


# --- the CLI: validation errors stop the run before anything exists ------------------------------


def test_mur_eval_run_refuses_a_bad_dataset_before_touching_the_capsule(tmp_path):
    ds = write(tmp_path / "d.jsonl", '{"case_id": "a", "task_path": "a.md"}\n{"case_id": ""}\n')
    run = mur("eval", "run", str(tmp_path / "no-capsule"), "--dataset", str(ds), cwd=tmp_path)
    assert run.code == 1
    assert run.out == ""
    assert run.err.splitlines()[0] == (
        f"error[E-EVAL-001]: {ds}:2: missing or empty 'case_id' (a non-empty string)")


def test_mur_eval_run_refuses_a_capsule_without_the_eval_hook(tmp_path):
    ds = write(tmp_path / "d.jsonl", '{"case_id": "a", "task_path": "a.md"}\n')
    write(tmp_path / "cap" / "murmur.yaml", "name: c\nversion: '0.1.0'\n" + SCORERS % "")
    run = mur("eval", "run", "cap", "--dataset", str(ds), "--json", cwd=tmp_path)
    assert (run.code, run.out) == (1, "")
    assert run.err.startswith("error[E-MAN-001]: murmur.yaml: mur eval run needs a 'murmur-hook-eval' artifact")
    assert not (tmp_path / "cap" / "workdir").exists()
    run = mur("eval", "run", "--dataset", str(ds), cwd=tmp_path)
    assert run.code == 1
    assert run.err.startswith(f"error[E-IO-001]: manifest not found: {tmp_path / 'murmur.yaml'}")
