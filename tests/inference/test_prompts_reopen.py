"""System prompt assembly (the C-4 notice is unconditional) and task reopening (reading the prompt
files is a pre-check: tests/session/test_session_resolve.py)."""

from __future__ import annotations

import pytest

from mur.inference.loop import LoopOutcome, build_reopen_task, run_task_with_reopens
from mur.inference.prompts import (
    MURMUR_MD_NOTICE,
    UNTRUSTED_CONTENT_NOTICE,
    build_process_system_prompt,
    build_system_prompt,
    ensure_notice,
)


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
