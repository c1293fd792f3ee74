"""Upstream's `crates/murmur-cli/tests/trace_cmd.rs` expectations for `mur trace steps`, tool inputs in
`mur trace show`, and redundant-call detection (show and report), ported one by one (its test name in
each docstring) onto our own trace files, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trace_events import mur
from trace_support import ID_A, ID_B, RUN_A, RUN_B, line, write_file, write_session

SID = "ses_0192f5e1e0007c2d8e9f00000000e005"


def ok(*args: str, cwd: Path) -> list[str]:
    run = mur(*args, cwd=cwd)
    assert (run.code, run.err) == (0, ""), run.err
    return run.out.splitlines()


def start(**extra) -> dict:
    return line("session_start", SID, 1000, capsule_name="t", capsule_version="0.3.0", model="m", max_turns=9,
                capabilities=[], tools_declared=["bash"], **extra)


def end(turns: int, tools: int, duration_ms: int = 900) -> dict:
    return line("session_end", SID, 9000, total_turns=turns, total_input_tokens=100 * turns,
                total_output_tokens=10 * turns, total_tool_calls=tools, total_shell_calls=0, duration_ms=duration_ms,
                exit_status="ok")


def calls(*turns: tuple[int, dict | None, int]) -> list[dict]:
    """A session whose turns each ask for bash: (turn, input or None, duration_ms)."""
    out = [start()]
    for n, given, ms in turns:
        out.append(line("inference", SID, 1000 + 10 * n, turn=n, input_tokens=100, output_tokens=10,
                        decision="tool_call", tool_name="bash"))
        call = line("tool_call", SID, 1005 + 10 * n, turn=n, tool_name="bash", input_bytes=9, output_bytes=0,
                    duration_ms=ms, status="ok")
        if given is not None:
            call["input"] = given
        out.append(call)
    return out + [end(len(turns), len(turns))]


# ── steps ────────────────────────────────────────────────────────────────────


def test_steps_defaults_to_the_latest_session_and_takes_a_suffix(tmp_path: Path):
    """steps_no_arg_resolves_to_last_session, steps_explicit_session_suffix_resolves"""
    write_session(tmp_path / "workdir", ID_A, RUN_A)
    write_session(tmp_path / "workdir", ID_B, RUN_B)
    assert ok("trace", "steps", cwd=tmp_path)[0] == f"Session {ID_B}  (6 turns)  max_turns_reached  2.3s"
    assert ok("trace", "steps", "a001", cwd=tmp_path)[0] == f"Session {ID_A}  (3 turns)  ok  750ms"


def test_steps_rows(tmp_path: Path):
    """steps_default_output_format, steps_end_turn_renders_dash, steps_end_turn_duration_is_dash"""
    assert ok("trace", "steps", write_file(tmp_path, "a.jsonl", RUN_A), cwd=tmp_path) == [
        f"Session {ID_A}  (3 turns)  ok  750ms",
        "",
        "  1  tool_call    notes       60ms",
        "  2  tool_call    bash        140ms",
        "  3  end_turn     —           —",
    ]


def test_steps_tool_column_fits_the_longest_name(tmp_path: Path):
    """upstream's tool column is at least 12 wide and as wide as the longest tool name"""
    events = calls((0, None, 5))
    events[1]["tool_name"] = events[2]["tool_name"] = "a_rather_long_tool_name"
    assert ok("trace", "steps", write_file(tmp_path, "t.jsonl", events), cwd=tmp_path)[2] == (
        "  0  tool_call    a_rather_long_tool_name5ms")


def test_steps_verbose_input_summary_is_cut_at_60(tmp_path: Path):
    """steps_verbose_truncates_long_input_at_60_chars"""
    out = ok("trace", "steps", "--verbose", write_file(tmp_path, "t.jsonl", calls((0, {"command": "y" * 75}, 50))),
             cwd=tmp_path)
    assert out[2] == '  0  tool_call    bash        50ms    "' + "y" * 60 + '…"'
    assert "y" * 61 not in "\n".join(out)


def test_steps_verbose_summary_is_the_first_string_by_sorted_key(tmp_path: Path):
    """upstream's summary walks the input as serde_json holds it: object keys in sorted order, depth first"""
    given = {"zzz": "not this one", "mid": {"count": 3, "name": "this one"}, "aaa": [1, 2]}
    out = ok("trace", "steps", "-v", write_file(tmp_path, "t.jsonl", calls((0, given, 8))), cwd=tmp_path)
    assert out[2] == '  0  tool_call    bash        8ms     "this one"'


def test_steps_zero_turns(tmp_path: Path):
    """steps_zero_turns_shows_header_and_no_rows"""
    out = ok("trace", "steps", write_file(tmp_path, "t.jsonl", [start(), end(0, 0, 100)]), cwd=tmp_path)
    assert out == [f"Session {SID}  (0 turns)  ok  100ms", ""]


@pytest.mark.parametrize("durations, shown", [
    ((75,), ["75ms"]),                       # steps_sub_second_duration_renders_as_ms
    ((1000,), ["1.0s"]),                     # steps_exactly_1000ms_renders_as_1_0s
    ((250, 2750), ["250ms", "2.8s"]),        # steps_mixed_ms_and_s_durations_both_appear
])
def test_steps_duration_column(tmp_path: Path, durations: tuple[int, ...], shown: list[str]):
    """steps_sub_second_duration_renders_as_ms, steps_exactly_1000ms_renders_as_1_0s,
    steps_mixed_ms_and_s_durations_both_appear"""
    events = calls(*[(n, {"command": f"step {n}"}, ms) for n, ms in enumerate(durations)])
    out = ok("trace", "steps", write_file(tmp_path, "t.jsonl", events), cwd=tmp_path)
    assert [row.split()[-1] for row in out[2:]] == shown


# ── tool inputs in show ──────────────────────────────────────────────────────


def test_show_renders_tool_input_inline(tmp_path: Path):
    """show_tool_call_input_rendered, old_trace_without_input_field_still_parses,
    show_trace_with_output_field_parses_cleanly"""
    out = ok("trace", "show", write_file(tmp_path, "t.jsonl", calls((0, {"command": "uname -a"}, 30))), cwd=tmp_path)
    assert '  turn 0  bash 30ms ✓  {"command":"uname -a"}' in out
    out = ok("trace", "show", write_file(tmp_path, "old.jsonl", calls((0, None, 25))), cwd=tmp_path)
    assert "  turn 0  bash 25ms ✓" in out and "capsule:    t v0.3.0" in out
    traced = calls((0, {"command": "ls"}, 12))
    traced[2]["output"] = "notes.md\n"
    out = ok("trace", "show", write_file(tmp_path, "out.jsonl", traced), cwd=tmp_path)
    assert '  turn 0  bash 12ms ✓  {"command":"ls"}' in out


def test_show_cuts_a_long_input_at_120_characters(tmp_path: Path):
    """show_tool_call_input_truncates_on_char_boundary (characters, not bytes)"""
    given = {"text": "q" + "ü" * 300}
    out = ok("trace", "show", write_file(tmp_path, "t.jsonl", calls((0, given, 30))), cwd=tmp_path)
    compact = json.dumps(given, ensure_ascii=False, separators=(",", ":"))
    assert f"  turn 0  bash 30ms ✓  {compact[:120]}…" in out


# ── redundant calls ──────────────────────────────────────────────────────────


def session(*tool_calls: dict) -> list[dict]:
    """Upstream's later fixtures: tool_call lines only, without session_id or timestamp."""
    body = [{"event_type": "tool_call", "duration_ms": 7, "status": "ok", **call} for call in tool_calls]
    return [line("session_start", SID, capsule_name="reader", capsule_version="0.1.0", model="m", max_turns=9),
            *body, line("session_end", total_turns=len(body), total_input_tokens=50, total_output_tokens=5,
                        total_tool_calls=len(body), total_shell_calls=0, duration_ms=80, exit_status="ok")]


def call(turn: int, tool: str, effect: str | None = None, resource: str | None = None, **given) -> dict:
    out = {"turn": turn, "tool_name": tool, "input": given}
    if effect is not None:
        out["state_effect"] = effect
    if resource is not None:
        out["resource_id"] = resource
    return out


REREAD = session(call(1, "read_doc", "read", path="docs/guide.md"), call(3, "read_doc", "read", path="docs/guide.md"))
CROSS = session(call(1, "grep_doc", "read", FilePath="docs/a.md", pattern="x"), call(2, "read_doc", "read",
                                                                                       FilePath="docs/a.md"))
CASES = {
    "reread": (REREAD, ["  turn 3  read_doc  docs/guide.md  (re-reads turn 1)"]),
    "write_clears": (session(call(1, "read_doc", "read", path="a.md"), call(2, "write_doc", "mutate", path="a.md"),
                             call(3, "read_doc", "read", path="a.md")), []),
    "cross_tool": (CROSS, ["  turn 2  read_doc  docs/a.md  (re-reads turn 1)"]),
    "no_path_field": (session(call(1, "grep_doc", "read", query="x"), call(2, "grep_doc", "read", query="x"),
                              {"turn": 3, "tool_name": "grep_doc", "state_effect": "read"}), []),
    "novel_tool": (session(call(1, "zeta-indexer", "read", op="outline", filename="lib/core.py"),
                           call(2, "zeta-indexer", "read", op="symbols", filename="lib/core.py")),
                   ["  turn 2  zeta-indexer  lib/core.py  (re-reads turn 1)"]),
    "novel_mutate": (session(call(1, "zeta-indexer", "read", op="outline", filename="lib/core.py"),
                             call(2, "zeta-indexer", "mutate", op="rename", filename="lib/core.py"),
                             call(3, "zeta-indexer", "read", op="outline", filename="lib/core.py")), []),
    "undeclared": (session(call(1, "opaque", path="a.md"), call(2, "opaque", path="a.md")), []),
    "undeclared_invalidates": (session(call(1, "read_doc", "read", path="a.md"), call(2, "opaque", path="a.md"),
                                       call(3, "read_doc", "read", path="a.md")), []),
    "plain_session": (RUN_A, []),
    "resource_symbol": (session(call(1, "graph", "read", "pkg.mod:Widget", symbol="Widget"),
                                call(4, "graph", "read", "pkg.mod:Widget", symbol="Widget")),
                        ["  turn 4  graph  pkg.mod:Widget  (re-reads turn 1)"]),
    "resource_precedence": (session(call(1, "graph", "read", "ref:Widget@2", path="src/w.py", symbol="Widget"),
                                    call(2, "graph", "read", "ref:Widget@2", path="src/w.py", symbol="Widget")),
                            ["  turn 2  graph  ref:Widget@2  (re-reads turn 1)"]),
    "resource_empty": (session(call(1, "graph", "read", "", path="src/w.py"), call(2, "graph", "read", "", path="src/w.py")),
                       ["  turn 2  graph  src/w.py  (re-reads turn 1)"]),
    "resource_mutate": (session(call(1, "graph", "read", "sym:W"), call(2, "graph", "mutate", "sym:W"),
                                call(3, "graph", "read", "sym:W")), []),
    "path_before_filename": (session(call(1, "r", "read", filename="b.md", path="a.md"),
                                     call(2, "r", "read", filename="c.md", path="a.md")),
                             ["  turn 2  r  a.md  (re-reads turn 1)"]),
    "non_string_path_is_no_path": (session(call(1, "r", "read", path=["a.md"]), call(2, "r", "read", path=["a.md"])),
                                   []),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_redundant_calls_in_show(tmp_path: Path, name: str):
    """show_flags_reread_with_no_intervening_write, show_intervening_write_clears_redundancy,
    show_cross_tool_find_then_read_is_flagged, show_no_path_field_never_flagged_no_panic,
    show_flags_novel_tool_by_declaration_only, show_novel_tool_declared_mutate_clears_redundancy,
    show_undeclared_calls_get_no_detection, show_undeclared_intervening_call_invalidates_conservatively,
    show_zero_redundant_on_existing_fixtures, show_flags_symbol_addressed_tool_via_declared_resource_id,
    show_declared_resource_id_takes_precedence_over_path_field, show_empty_resource_id_falls_back_to_path_field,
    show_declared_mutate_clears_redundancy_for_declared_resource_id"""
    events, expected = CASES[name]
    out = ok("trace", "show", write_file(tmp_path, "t.jsonl", events), cwd=tmp_path)
    at = out.index("── Redundant calls ──────────────────────────────")
    assert out[at + 1: at + 2 + len(expected)] == [f"count:      {len(expected)}", *expected]
    assert out[at + 2 + len(expected)] == ""
    assert ("re-reads" in "\n".join(out)) == bool(expected)


def test_redundant_reads_start_afresh_with_each_task(tmp_path: Path):
    """mur: a new task (or attempt) is a new conversation; it has not read what the last one did"""
    events = session(call(1, "read_doc", "read", path="a.md"))
    events[2:2] = [line("task_start", SID, task_id="tsk_2", context_id="c", source="a2a"),
                   {"event_type": "tool_call", "duration_ms": 7, "status": "ok",
                    **call(1, "read_doc", "read", path="a.md")}]
    out = ok("trace", "show", write_file(tmp_path, "t.jsonl", events), cwd=tmp_path)
    assert out[out.index("── Redundant calls ──────────────────────────────") + 1] == "count:      0"


def test_redundant_calls_in_report(tmp_path: Path):
    """report_shows_redundant_calls_row_and_per_session_line, report_redundant_row_stats_are_correct"""
    root = tmp_path / "workdir"
    for sid, events in (("ses_0192f5e1f0017c2d8e9f00000000f001", REREAD),
                        ("ses_0192f5e1f0027c2d8e9f00000000f002", CROSS),
                        ("ses_0192f5e1f0037c2d8e9f00000000f003", RUN_A)):
        write_session(root, sid, events)
    out = ok("trace", "report", cwd=tmp_path)
    assert out.count("  Redundant calls: 1") == 2  # a block line only where there are some
    assert "redundant calls        0.7            0.5            0.0            1.0" in out
    write_session(root, "ses_0192f5e1f0027c2d8e9f00000000f002", RUN_B)
    rows = [row for row in ok("trace", "report", cwd=tmp_path) if row.startswith("redundant calls")]
    assert rows == ["redundant calls        0.3            0.5            0.0            1.0"]
