"""System prompt assembly (the C-4 notice is unconditional) and task reopening."""

from __future__ import annotations

import pytest

from mur.errors import MurError
from mur.inference.loop import LoopOutcome, build_reopen_task, run_task_with_reopens
from mur.inference.prompts import (
    MURMUR_MD_NOTICE,
    UNTRUSTED_CONTENT_NOTICE,
    build_process_system_prompt,
    build_system_prompt,
    ensure_notice,
    load_compaction_prompt,
    load_system_prompt,
)
from mur.manifest.capsule import Compaction, Inference


def inference(**kw) -> Inference:
    return Inference.model_validate({"transport": "http", "model": "m", **kw})


def test_inline_prompt_and_source():
    loaded = load_system_prompt(inference(system_prompt="  Be strict.\n"), "/nowhere")
    assert (loaded.text, loaded.source) == ("  Be strict.\n", "manifest")
    assert load_system_prompt(inference(), "/nowhere").source == "none"
    assert load_system_prompt(None, "/nowhere").text is None


def test_prompt_file_is_read_verbatim_relative_to_the_manifest(tmp_path):
    (tmp_path / "conventions.md").write_text("\n  keep whitespace  \n\n")
    loaded = load_system_prompt(inference(system_prompt_file="conventions.md"), tmp_path)
    assert loaded.text == "\n  keep whitespace  \n\n"


def test_unreadable_prompt_file_is_e_run_009(tmp_path):
    with pytest.raises(MurError) as err:
        load_system_prompt(inference(system_prompt_file="missing.md"), tmp_path)
    assert err.value.code == "E-RUN-009"
    assert err.value.message.startswith(f"failed to read inference.system_prompt_file at {tmp_path / 'missing.md'}")
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(MurError) as err:
        load_system_prompt(inference(system_prompt_file="binary.md"), tmp_path)
    assert err.value.code == "E-RUN-009"


def test_prompt_artifact_text(tmp_path):
    skill = tmp_path / "skill.md"
    skill.write_text("# Reviewer\nReview carefully.")
    loaded = load_system_prompt(inference(system_prompt_artifact="reviewer"), tmp_path, artifact_path=skill)
    assert loaded.text == "# Reviewer\nReview carefully."
    both = load_system_prompt(inference(system_prompt="First.", system_prompt_artifact="r"), tmp_path, artifact_path=skill)
    assert both.text == "First.\n\n# Reviewer\nReview carefully."
    with pytest.raises(MurError) as err:
        load_system_prompt(inference(system_prompt_artifact="r"), tmp_path, artifact_path=tmp_path / "gone.md")
    assert err.value.code == "E-RUN-009" and "system_prompt_artifact 'r'" in err.value.message


def test_compaction_prompt(tmp_path):
    assert load_compaction_prompt(Compaction(system_prompt="sum up"), tmp_path) == "sum up"
    (tmp_path / "c.md").write_text("from file")
    assert load_compaction_prompt(Compaction(system_prompt_file="c.md"), tmp_path) == "from file"
    assert load_compaction_prompt(Compaction(), tmp_path) is None
    with pytest.raises(MurError) as err:
        load_compaction_prompt(Compaction(system_prompt_file="no.md"), tmp_path)
    assert err.value.code == "E-RUN-009"


def test_notice_is_always_prepended():
    http = build_system_prompt("Always begin with CONFIRMED:", capsule_name="c", capsule_version="1.0.0")
    assert http.startswith("[Capsule]\nName: c\nVersion: 1.0.0\n")
    assert http.index(UNTRUSTED_CONTENT_NOTICE) < http.index("Always begin")
    assert http.endswith("Always begin with CONFIRMED:")
    assert UNTRUSTED_CONTENT_NOTICE in build_system_prompt(None) and MURMUR_MD_NOTICE in build_system_prompt(None)
    assert build_process_system_prompt(None) == f"{MURMUR_MD_NOTICE}\n{UNTRUSTED_CONTENT_NOTICE}"
    process = build_process_system_prompt("Be brief.")
    assert process.endswith("\n\nBe brief.") and build_process_system_prompt(process) == process
    assert ensure_notice(http) == http and UNTRUSTED_CONTENT_NOTICE in ensure_notice("custom")
    assert build_system_prompt("x") == build_system_prompt("x")  # launch-invariant


def outcome(status: str, turns: int) -> LoopOutcome:
    return LoopOutcome(exit_status=status, result=status, turns=turns, input_tokens=turns, output_tokens=1)


def test_reopen_reinjects_feedback_and_shares_the_turn_budget():
    tasks, budgets, events = [], [], []

    def attempt(task: str, turns_left: int) -> LoopOutcome:
        tasks.append(task)
        budgets.append(turns_left)
        return outcome("ok", 2)

    wishes = iter([("gatekeeper", "add tests"), ("gatekeeper", "tests still missing"), None])
    done = run_task_with_reopens("Write code.", max_turns=10, max_task_reopens=2, attempt=attempt,
                                 on_task_end=lambda o: next(wishes), trace=events.append, task_id="tsk_1")
    assert done.exit_status == "ok" and done.reopen_count == 2 and budgets == [10, 8, 6]
    assert done.turns == 6 and done.input_tokens == 6
    assert tasks[0] == "Write code."
    assert "## Reopen 1 (from hook `gatekeeper`)\n\nadd tests" in tasks[2]
    assert "## Reopen 2 (from hook `gatekeeper`)\n\ntests still missing" in tasks[2]
    assert [e["reopen_number"] for e in events] == [1, 2]
    assert events[0] == {"event_type": "task_reopened", "task_id": "tsk_1", "hook_name": "gatekeeper",
                         "reason": "add tests", "reopen_number": 1}


@pytest.mark.parametrize("max_reopens, max_turns, turns, attempts", [(1, 10, 2, 2), (0, 10, 2, 1), (5, 4, 2, 2)])
def test_reopen_budget_exhausted(max_reopens, max_turns, turns, attempts):
    runs = []

    def attempt(task, left):
        runs.append(left)
        return outcome("ok", turns)

    done = run_task_with_reopens("t", max_turns=max_turns, max_task_reopens=max_reopens, attempt=attempt,
                                 on_task_end=lambda o: ("h", "more"), trace=lambda e: None)
    assert done.exit_status == "reopen_budget_exhausted" and len(runs) == attempts


def test_no_hook_means_one_attempt():
    done = run_task_with_reopens("t", max_turns=3, max_task_reopens=1, attempt=lambda t, n: outcome("failed", 1),
                                 on_task_end=None, trace=lambda e: None)
    assert done.exit_status == "failed" and done.reopen_count == 0
    assert build_reopen_task("a\n\n", [("h", " why ")]).startswith("a\n\n---\n\n# Reopen feedback")
