"""Upstream's `crates/murmur-cli/tests/trace_cmd.rs` expectations for `mur trace show|diff|report`, ported
one by one (its test name in each docstring) onto our own trace files, through the real CLI. Where
upstream only looks for a word, these tests pin the whole line it belongs to."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from trace_events import mur
from trace_support import ID_A, ID_B, ID_C, RUN_A, RUN_B, RUN_C, line, tasks, write_file, write_session
from mur.trace.summary import TRACE_HINT


def ok(*args: str, cwd: Path) -> list[str]:
    run = mur(*args, cwd=cwd)
    assert (run.code, run.err) == (0, ""), run.err
    return run.out.splitlines()


def fails(*args: str, cwd: Path) -> str:
    run = mur(*args, cwd=cwd)
    assert run.code == 1 and run.out == "" and "Traceback" not in run.err, run
    return run.err


@pytest.fixture
def wd(tmp_path: Path) -> Path:
    """A workdir holding sessions A and B (B sorts last: the most recent)."""
    write_session(tmp_path / "workdir", ID_A, RUN_A)
    write_session(tmp_path / "workdir", ID_B, RUN_B)
    return tmp_path / "workdir"


# ── show ─────────────────────────────────────────────────────────────────────


def test_show_covers_all_metric_categories(tmp_path: Path):
    """show_exits_zero_and_covers_all_metric_categories, show_includes_tokens_per_turn_average"""
    out = ok("trace", "show", write_file(tmp_path, "a.jsonl", RUN_A), cwd=tmp_path)
    for expected in (f"session:    {ID_A}", "capsule:    relay v2.4.1", "model:      claude-sonnet-4",
                     "status:     ok", "duration:   750ms", "count:      3  (max: 12)",
                     "input:      4,800  (avg 1600/turn)", "output:     270  (avg 90/turn)", "total:      5,070",
                     "count:      2  (2 ok, 0 error)  success 100.0%", "latency:    avg 100ms",
                     "exit codes: 1 ok", "latency:    avg 30ms", "fired:      no"):
        assert expected in out


def test_show_tool_calls_by_turn(tmp_path: Path):
    """show's Tool calls: a line per turn, its calls, or the decision of a turn without one."""
    out = ok("trace", "show", write_file(tmp_path, "b.jsonl", RUN_B), cwd=tmp_path)
    at = out.index("── Tool calls ───────────────────────────────────")
    assert out[at + 1: at + 10] == ["count:      5  (4 ok, 1 error)  success 80.0%", "latency:    avg 104ms",
                                    "  turn 1  bash 110ms ✓", "  turn 2  bash 90ms ✗", "  turn 3  bash 130ms ✓",
                                    "  turn 4  bash 70ms ✓", "  turn 5  bash 120ms ✓", "  turn 6  end_turn", ""]


def test_show_compaction_with_turn_and_token_counts(tmp_path: Path):
    """show_compaction_appears_with_turn_and_token_counts, show_max_turns_reached_status"""
    out = ok("trace", "show", write_file(tmp_path, "b.jsonl", RUN_B), cwd=tmp_path)
    assert "fired:      yes  at turn 4  (8,400 → 1,900 tokens)" in out
    assert "status:     max_turns_reached" in out
    assert "exit codes: 4 ok, 1 failed (exit 2)" in out


def test_show_no_tool_calls_is_zero(tmp_path: Path):
    """show_no_tool_calls_produces_zero_not_error"""
    out = ok("trace", "show", write_file(tmp_path, "c.jsonl", RUN_C), cwd=tmp_path)
    at = out.index("── Tool calls ───────────────────────────────────")
    assert out[at + 1] == "count:      0" and out[at + 2] == ""


def test_show_resolves_session_addresses(wd: Path):
    """show_no_arg_single_session_resolves_correctly, ..._multiple_sessions_picks_lexicographically_largest,
    show_full_session_id_resolves_correctly, show_suffix_unique_match_resolves_correctly,
    show_suffix_case_insensitive, show_legacy_path_with_slash_passes_through"""
    single = wd.parent / "single"
    write_session(single, ID_A, RUN_A)
    assert "duration:   750ms" in ok("trace", "show", "--workdir", str(single), cwd=wd.parent)
    latest = ok("trace", "show", "--workdir", str(wd), cwd=wd.parent)
    assert "duration:   2.3s" in latest and "status:     max_turns_reached" in latest
    assert f"session:    {ID_A}" in ok("trace", "show", "--workdir", str(wd), ID_A, cwd=wd.parent)
    assert "duration:   750ms" in ok("trace", "show", "--workdir", str(wd), "a001", cwd=wd.parent)
    assert "duration:   750ms" in ok("trace", "show", "--workdir", str(wd), "A001", cwd=wd.parent)
    assert "capsule:    relay v2.4.1" in ok("trace", "show", str(wd / ID_A / "trace.jsonl"), cwd=wd.parent)


def test_show_address_errors(wd: Path, tmp_path: Path):
    """show_no_arg_empty_workdir_gives_clear_error, show_full_session_id_not_present_gives_clear_error,
    show_suffix_no_match_gives_clear_error, show_suffix_multiple_matches_gives_ambiguity_error,
    show_nonexistent_file_exits_nonzero_with_error"""
    (tmp_path / "empty").mkdir()
    err = fails("trace", "show", "--workdir", str(tmp_path / "empty"), cwd=tmp_path)
    assert err.startswith(f"error[E-TRC-002]: no sessions found in workdir at {tmp_path / 'empty'}")
    err = fails("trace", "show", "--workdir", str(tmp_path / "empty"), ID_A, cwd=tmp_path)
    assert err.startswith(f"error[E-TRC-002]: session {ID_A} not found in {tmp_path / 'empty'}")
    err = fails("trace", "show", "--workdir", str(wd), "f00d", cwd=tmp_path)
    assert err.startswith(f"error[E-TRC-002]: no session found matching suffix 'f00d' in {wd}")
    twins = tmp_path / "twins"
    write_session(twins, "ses_0192f5e1a3b47c2d8e9f000000000abc", RUN_A)
    write_session(twins, "ses_0192f5e1b9d07c2d8e9f000000000abc", RUN_B)
    err = fails("trace", "show", "--workdir", str(twins), "abc", cwd=tmp_path)
    assert err.startswith("error[E-TRC-002]: ambiguous: 'abc' matches 2 sessions — provide more characters\n")
    err = fails("trace", "show", str(tmp_path / "nowhere.jsonl"), cwd=tmp_path)
    assert err.startswith(f"error[E-IO-001]: trace file not found: {tmp_path / 'nowhere.jsonl'}")


def test_show_malformed_and_empty_traces(tmp_path: Path):
    """show_malformed_json_exits_nonzero_with_line_number, show_empty_file_exits_nonzero"""
    broken = write_file(tmp_path, "broken.jsonl", f"{RUN_C[0]}\nnot json at all\n".replace("'", '"'))
    err = fails("trace", "show", broken, cwd=tmp_path)
    assert err.startswith(f"error[E-TRC-001]: {broken}:2: ")
    empty = write_file(tmp_path, "empty.jsonl", "")
    err = fails("trace", "show", empty, cwd=tmp_path)
    assert err == (f"error[E-TRC-001]: {empty}: trace file is empty (incomplete or zero-event session)\n"
                   f"  hint: {TRACE_HINT}\n")


def test_show_unknown_event_type_is_skipped(tmp_path: Path):
    """show_unknown_event_type_is_silently_skipped (the summary skips it; mur's Timeline lists it)"""
    events = RUN_C[:1] + [line("brand_new_event", ID_C, 12_010, payload="x")] + RUN_C[1:]
    out = ok("trace", "show", write_file(tmp_path, "new.jsonl", events), cwd=tmp_path)
    assert "Tasks" not in "\n".join(out)
    assert any(row.endswith("brand_new_event  payload=x") for row in out)


def test_show_tasks_section_only_for_several_tasks(tmp_path: Path):
    """trace_show_single_task_no_breakdown, trace_show_multi_task_breakdown,
    trace_show_backward_compat_no_task_events"""
    sid = "ses_0192f5e1d0007c2d8e9f00000000d004"
    assert "Tasks" not in "\n".join(ok("trace", "show", write_file(tmp_path, "one.jsonl", tasks(sid, 1)),
                                       cwd=tmp_path))
    assert "Tasks" not in "\n".join(ok("trace", "show", write_file(tmp_path, "a.jsonl", RUN_A), cwd=tmp_path))
    out = ok("trace", "show", write_file(tmp_path, "three.jsonl", tasks(sid, 3)), cwd=tmp_path)
    at = out.index("── Tasks ────────────────────────────────────────")
    assert out[at + 1: at + 5] == [
        "task 1  tsk_00000001  turns: 2  in: 600  out: 40  ok  100ms",
        "task 2  tsk_00000002  turns: 3  in: 900  out: 60  ok  200ms",
        "task 3  tsk_00000003  turns: 4  in: 1,200  out: 80  ok  300ms",
        "",
    ]
    assert "task 4" not in "\n".join(out)


def test_show_reopens(tmp_path: Path):
    """show_surfaces_reopen_events_and_count"""
    sid = ID_C
    events = [
        RUN_C[0],
        line("task_start", sid, 12_001, task_id="tsk_7", context_id="ctx_7", source="a2a", message_parts_bytes=4),
        line("inference", sid, 12_010, turn=1, input_tokens=500, output_tokens=30, decision="end_turn",
             tool_name=None),
        line("task_reopened", sid, 12_020, task_id="tsk_7", hook_name="reviewer", reopen_number=1,
             reason="the summary misses the second file" + " and more" * 20),
        line("inference", sid, 12_030, turn=2, input_tokens=600, output_tokens=35, decision="end_turn",
             tool_name=None),
        line("task_end", sid, 12_040, task_id="tsk_7", exit_status="ok", duration_ms=39, turns=2, input_tokens=1100,
             output_tokens=65, tool_calls=0, shell_calls=0, reopen_count=1),
        RUN_C[-1],
    ]
    out = ok("trace", "show", write_file(tmp_path, "reopen.jsonl", events), cwd=tmp_path)
    at = out.index("── Reopens ──────────────────────────────────────")
    reason = ("the summary misses the second file" + " and more" * 20)[:80]
    assert out[at + 1] == f"reopen 1  by reviewer  “{reason}”"


# ── diff ─────────────────────────────────────────────────────────────────────

DIFF_ROWS = [
    "Metric                 Run A            Run B            Delta",
    "turns                  3                6                +3 (A better)",
    "duration               750ms            2.3s             +1.6s (A better)",
    "input tokens           4,800            15,800           +11000 (A better)",
    "output tokens          270              1,080            +810 (A better)",
    "input/turn (avg)       1600             2633             +1033.3 (A better)",
    "output/turn (avg)      90               180              +90.0 (A better)",
    "tool calls             2                5                +3 (A better)",
    "tool success rate      100.0%           80.0%            -20.0 (A better)",
    "avg tool latency       100ms            104ms            +4ms (A better)",
    "skill calls            0                0                =",
    "shell calls            1                5                +4 (A better)",
    "avg shell latency      30ms             34ms             +4ms (A better)",
    "compaction             none             turn 4           changed",
    "exit status            ok               max_turns_reached changed",
]


def test_diff_shows_both_runs_and_every_metric(tmp_path: Path):
    """diff_exits_zero_and_shows_both_runs, diff_shows_turn_count_difference,
    diff_shows_token_consumption_difference, diff_shows_exit_status_for_both_runs,
    diff_shows_compaction_difference, diff_better_worse_indicators_present,
    diff_legacy_path_passthrough_on_both_args"""
    out = ok("trace", "diff", write_file(tmp_path, "a.jsonl", RUN_A), write_file(tmp_path, "b.jsonl", RUN_B),
             cwd=tmp_path)
    for row in DIFF_ROWS:
        assert row in out


@pytest.mark.parametrize("args", [[ID_A, ID_B], ["a001", "b002"], ["@2", "@1"], [ID_A, "b002"], []])
def test_diff_resolves_both_addresses(wd: Path, args: list[str]):
    """diff_both_full_session_ids_resolve, diff_both_suffixes_unambiguous_resolve,
    diff_ordinal_at1_and_at2_resolve_to_correct_sessions, diff_mixed_full_id_and_suffix,
    diff_no_args_defaults_to_two_most_recent_sessions, diff_two_args_resolves_normally"""
    out = ok("trace", "diff", "--workdir", str(wd), *args, cwd=wd.parent)
    assert "duration               750ms            2.3s             +1.6s (A better)" in out


def test_diff_address_errors(wd: Path, tmp_path: Path):
    """diff_ambiguous_suffix_names_which_argument, diff_ordinal_out_of_range_gives_clear_error,
    diff_both_args_fail_reports_both_errors, diff_one_arg_gives_clear_error,
    diff_nonexistent_file_a_exits_nonzero"""
    write_session(wd, "ses_0192f5e1a3b47c2d8e9f000000000abc", RUN_A)
    write_session(wd, "ses_0192f5e1b9d07c2d8e9f000000000abc", RUN_B)
    err = fails("trace", "diff", "--workdir", str(wd), "abc", "b002", cwd=tmp_path)
    assert err.startswith("error[E-TRC-002]: before: ambiguous: 'abc' matches 2 sessions")
    err = fails("trace", "diff", "--workdir", str(wd), "@1", "@5", cwd=tmp_path)
    assert err.startswith("error[E-TRC-002]: after: @5 is out of range — workdir has 4 sessions")
    err = fails("trace", "diff", "--workdir", str(wd), "@0", "@1", cwd=tmp_path)
    assert err.startswith("error[E-TRC-002]: before: ordinal must be @1 or higher\n")
    err = fails("trace", "diff", "--workdir", str(wd), "@2", "@x", cwd=tmp_path)
    assert err.startswith("error[E-TRC-002]: after: invalid ordinal '@x' — expected @1, @2, ...\n")
    err = fails("trace", "diff", "--workdir", str(wd), "f00d", "beef", cwd=tmp_path)
    assert err.startswith("error[E-TRC-002]: before: no session found matching suffix 'f00d'")
    assert "\nafter: no session found matching suffix 'beef'" in err
    err = fails("trace", "diff", "--workdir", str(wd), ID_A, cwd=tmp_path)
    assert "mur trace diff expects 0 or 2 arguments, got 1" in err
    err = fails("trace", "diff", str(tmp_path / "gone.jsonl"), write_file(tmp_path, "b.jsonl", RUN_B), cwd=tmp_path)
    assert err.startswith(f"error[E-IO-001]: before: trace file not found: {tmp_path / 'gone.jsonl'}")


# ── report ───────────────────────────────────────────────────────────────────


def test_report_statistics_and_exit_statuses(wd: Path):
    """report_exits_zero_and_shows_session_count, report_shows_aggregate_statistics,
    report_shows_exit_status_distribution, report_no_args_includes_all_sessions"""
    write_session(wd, ID_C, RUN_C)
    out = ok("trace", "report", "--workdir", str(wd), cwd=wd.parent)
    assert f"Sessions: 3  ({wd})" in out
    at = out.index("Metric                 Mean           StdDev         Min            Max")
    assert out[at + 2: at + 10] == [
        "turns                  3.3            2.1            1.0            6.0",
        "duration (ms)          1,150          825            400            2,300",
        "input tokens           7,100          6,375          700            15,800",
        "output tokens          463            446            40             1,080",
        "tool calls             2.3            2.1            0.0            5.0",
        "tool success (%)       90.0           10.0           80.0           100.0",
        "shell calls            2.0            2.2            0.0            5.0",
        "redundant calls        0.0            0.0            0.0            0.0",
    ]
    at = out.index("Exit status:")
    assert out[at + 1: at + 3] == ["  max_turns_reached        1  (33.3%)", "  ok                       2  (66.7%)"]


def test_report_selection(tmp_path: Path):
    """report_works_with_single_session, report_last_n_picks_most_recent,
    report_explicit_sessions_only_those_included"""
    root = tmp_path / "workdir"
    write_session(root, ID_A, RUN_A)
    assert "Sessions: 1  (workdir)" in ok("trace", "report", cwd=tmp_path)
    ids = [f"ses_0192f5e1f{n:03x}7c2d8e9f00000000e00{n}" for n in range(1, 5)]  # all after ID_A
    for sid in ids:
        write_session(root, sid, [{**e, "session_id": sid} for e in RUN_C])
    out = ok("trace", "report", "--last", "3", cwd=tmp_path)
    assert "Sessions: 3  (workdir)  last 3" in out
    assert [row.split()[-1] for row in out if row.startswith("  Id:")] == ids[1:]
    out = ok("trace", "report", ID_A, ids[0], cwd=tmp_path)
    assert "Sessions: 2  (workdir)" in out
    assert [row.split()[-1] for row in out if row.startswith("  Id:")] == [ID_A, ids[0]]


def test_report_since_reads_the_session_ids_clock(tmp_path: Path):
    """report_since_filters_by_timestamp: the first 12 hex digits of an id are its creation time (ms)"""
    now = int(time.time() * 1000)
    for n, minutes in enumerate((45, 15, 150, 240), start=1):
        write_session(tmp_path / "workdir", f"ses_{now - minutes * 60_000:012x}7c2d8e9f0000000{n:05x}", RUN_A)
    assert "Sessions: 2  (workdir)  since 1h" in ok("trace", "report", "--since", "1h", cwd=tmp_path)
    assert "Sessions: 4  (workdir)  since 5h" in ok("trace", "report", "--since", "5h", cwd=tmp_path)


@pytest.mark.parametrize("flag", ["--since", "--last"])
def test_report_filter_with_explicit_sessions(wd: Path, flag: str):
    """report_since_combined_with_explicit_sessions_errors, report_last_combined_with_explicit_sessions_errors"""
    err = fails("trace", "report", "--workdir", str(wd), flag, "1h" if flag == "--since" else "1", ID_A,
                cwd=wd.parent)
    assert err == (f"error[E-TRC-002]: {flag} cannot be combined with explicit session arguments\n"
                   "  hint: give either sessions or the filter\n")


def test_report_errors_and_incomplete_sessions(tmp_path: Path):
    """report_nonexistent_workdir_exits_nonzero, report_empty_workdir_gives_clear_error,
    report_skips_incomplete_sessions_and_reports_complete_ones, report_all_incomplete_sessions_is_an_error"""
    assert fails("trace", "report", "--workdir", "nowhere", cwd=tmp_path).startswith(
        "error[E-IO-001]: workdir not found: nowhere")
    (tmp_path / "empty").mkdir()
    assert fails("trace", "report", "--workdir", "empty", cwd=tmp_path).startswith(
        "error[E-TRC-002]: no sessions found in workdir at empty")
    root = tmp_path / "workdir"
    write_session(root, ID_A, "")
    write_session(root, ID_B, RUN_B[:3])  # killed mid-run: no session_end
    err = fails("trace", "report", cwd=tmp_path)
    assert "error[E-TRC-001]: no complete sessions to report — all traces are empty or incomplete" in err
    write_session(root, ID_C, RUN_C)
    run = mur("trace", "report", cwd=tmp_path)
    assert run.code == 0 and "Sessions: 1  (workdir)" in run.out
    assert run.err.startswith("note: skipped 2 incomplete session(s)\n")


def test_report_session_blocks(wd: Path):
    """report_session_block_header_shows_id_duration_turns, report_session_block_no_error_no_parenthetical,
    report_session_block_error_shows_parenthetical, report_session_block_exit_codes_sorted_by_frequency,
    report_session_block_no_shell_calls_omits_shell_line, report_session_block_latency_shown_with_correct_averages,
    report_session_block_multi_tool_latency_average, report_session_block_latency_omitted_when_no_tool_calls"""
    write_session(wd, ID_C, RUN_C)
    out = ok("trace", "report", "--workdir", str(wd), cwd=wd.parent)
    blocks = "\n".join(out).split("\n\nSessions: ")[0].split("\n\n")
    assert blocks[0:2] == ["Session ses_0192f5e1...  750ms  3 turns",
                           f"  Id:            {ID_A}\n  Status:        ok  (started 1970-01-01 00:00:05 UTC)\n"
                           "  Tool calls:    2\n  Shell calls:   1  exit codes: 1 ok\n"
                           "  Avg latency:   tool 100ms  shell 30ms"]
    assert blocks[2] == "Session ses_0192f5e1...  2.3s  6 turns"
    assert blocks[3].splitlines()[2:] == ["  Tool calls:    5  (4 ok, 1 error)",
                                          "  Shell calls:   5  exit codes: 4 ok, 1 failed (exit 2)",
                                          "  Avg latency:   tool 104ms  shell 34ms"]
    assert blocks[4] == "Session ses_0192f5e1...  400ms  1 turn"
    assert blocks[5].splitlines()[2:] == ["  Tool calls:    0"]  # no shell line, no latency line


def test_report_per_task_averages(tmp_path: Path):
    """trace_report_per_task_averages_section, trace_report_no_per_task_section_when_all_single_task"""
    root = tmp_path / "workdir"
    write_session(root, ID_A, tasks(ID_A, 3))
    write_session(root, ID_B, tasks(ID_B, 3))
    out = ok("trace", "report", cwd=tmp_path)
    at = out.index("── Per-task averages (multi-task sessions only) ──────────────")
    assert out[at + 1: at + 8] == [
        "Metric                 Mean           StdDev         Min            Max",
        "────────────────────── ────────────── ────────────── ────────────── ──────────────",
        "task turns             3.0            0.8            2.0            4.0",
        "task input tokens      900            244            600            1,200",
        "task output tokens     60             16             40             80",
        "task duration (ms)     200            81             100            300",
        "Tasks: 6",
    ]
    write_session(root, ID_A, tasks(ID_A, 1))
    write_session(root, ID_B, RUN_B)
    assert "Per-task averages" not in "\n".join(ok("trace", "report", cwd=tmp_path))
