"""`mur trace show`: session addresses (E-TRC-002), parsing (E-TRC-001), the summary and the timeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mur.cli.main import main
from mur.errors import MurError
from mur.trace.reader import load_events
from mur.trace.sessions import list_sessions, resolve_trace
from mur.trace.show import render
from mur.trace.summary import summarize

from trace_events import session_events

IDS = [
    "ses_019f01a940ce7761854e768ecbe30001",
    "ses_019f01a940ce7761854e768ecbe3aaaa",
    "ses_019f01a940ce7761854e768ecbeaaaaa",
]


def write_session(root: Path, sid: str, events: list[dict] | None = None) -> Path:
    d = root / sid
    d.mkdir(parents=True)
    rows = events if events is not None else session_events(sid)
    (d / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in rows))
    return d


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "workdir"
    for sid in IDS:
        write_session(root, sid)
    (root / "not-a-session").mkdir()
    return root


def code_of(fn, *args) -> str:
    with pytest.raises(MurError) as err:
        fn(*args)
    return err.value.code


def test_addresses(workdir: Path):
    assert [p.name for p in list_sessions(workdir)] == IDS
    assert resolve_trace(None, workdir) == workdir / IDS[2] / "trace.jsonl"
    assert resolve_trace("@1", workdir).parent.name == IDS[2]
    assert resolve_trace("@3", workdir).parent.name == IDS[0]
    assert resolve_trace(IDS[1], workdir).parent.name == IDS[1]
    assert resolve_trace(IDS[1].upper().replace("SES_", "ses_"), workdir).parent.name == IDS[1]
    assert resolve_trace("0001", workdir).parent.name == IDS[0]
    assert resolve_trace("EAAAAA", workdir).parent.name == IDS[2]  # case-insensitive
    path = workdir / IDS[0] / "trace.jsonl"
    assert resolve_trace(str(path), workdir) == path
    assert resolve_trace(str(workdir / IDS[1]), workdir) == workdir / IDS[1] / "trace.jsonl"


@pytest.mark.parametrize("address", ["aaaa", "zzzz", "@4", "@0", "@x", "abc", "ses_" + "f" * 32])
def test_addresses_matching_none_or_several_are_refused(workdir: Path, address: str):
    assert code_of(resolve_trace, address, workdir) == "E-TRC-002"


def test_a_path_to_no_trace_is_upstreams_file_not_found(workdir: Path):
    with pytest.raises(MurError) as err:
        resolve_trace("nope/trace.jsonl", workdir)
    assert (err.value.code, err.value.message) == ("E-IO-001", "trace file not found: nope/trace.jsonl")


def test_ambiguous_suffix_lists_the_matches(workdir: Path):
    with pytest.raises(MurError) as err:
        resolve_trace("aaaa", workdir)
    assert IDS[1] in err.value.message and IDS[2] in err.value.message


def test_mur_run_workdir_layout_is_found(tmp_path: Path):
    write_session(tmp_path / "wd" / ".murmur", IDS[0])
    assert resolve_trace("@1", tmp_path / "wd").parent.name == IDS[0]
    assert code_of(resolve_trace, "@1", tmp_path / "missing") == "E-TRC-002"


def test_run_from_a_capsules_parent_the_hint_names_the_capsule(tmp_path: Path, monkeypatch, capsys):
    """`mur run -m demo` writes demo/workdir; `mur trace show` (and report, eval) from the same
    directory looks in ./workdir: the hint says `-m demo` instead of only --workdir."""
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "murmur.yaml").write_text("name: demo\nversion: 0.1.0\n")
    write_session(tmp_path / "demo" / "workdir", IDS[0])
    (tmp_path / "other").mkdir()  # a directory without a capsule, and a capsule without sessions
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "murmur.yaml").write_text("name: empty\nversion: 0.1.0\n")
    monkeypatch.chdir(tmp_path)
    for argv in (["trace", "show"], ["trace", "report"], ["eval", "show"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        err = capsys.readouterr().err
        assert done.value.code == 1 and "hint: sessions of capsules here: pass -m demo to read" in err, (argv, err)
    with pytest.raises(SystemExit) as done:
        main(["trace", "show", "-m", "demo"])
    assert done.value.code == 0 and IDS[0] in capsys.readouterr().out


def test_summary_numbers():
    s = summarize(session_events())
    assert (s["capsule"], s["version"], s["model"], s["status"], s["attempts"]) == ("hello", "0.1.0", "claude-x",
                                                                                      "failed", 2)
    assert s["duration_ms"] == 408 + 149
    assert (s["turns"]["count"], s["turns"]["max"]) == (3, 5)
    assert s["turns"]["decisions"] == [{"part": 1, "turn": 0, "decision": "tool_call"},
                                       {"part": 1, "turn": 1, "decision": "end_turn"},
                                       {"part": 2, "turn": 0, "decision": "tool_call"}]
    assert s["tokens"] == {"input": 260, "output": 52, "total": 312, "avg_input_per_turn": 260 / 3,
                           "avg_output_per_turn": 52 / 3}
    assert {k: s["tool_calls"][k] for k in ("count", "ok", "error", "avg_ms", "success_pct")} == {
        "count": 2, "ok": 1, "error": 1, "avg_ms": 35, "success_pct": 50.0}
    assert s["redundant_calls"] == [] and s["reopens"] == []
    assert s["shell_calls"] == {"count": 1, "exit_codes": {"0": 1}, "avg_ms": 50, "failures": []}
    assert s["compaction"] == [{"turn": 1, "tokens_before": 9000, "tokens_after": 800}]
    assert [t["task_id"] for t in s["tasks"]] == ["tsk_1", "tsk_2"]
    assert [r["offset_ms"] for r in s["timeline"]][:3] == [0, 1, 2]
    assert len(s["timeline"]) == 16


def test_render_has_sections_and_a_timeline():
    text = render(summarize(session_events()))
    titles = [line.split("── ")[1].rstrip("─ ") for line in text.splitlines() if line.startswith("── ")]
    assert titles == ["Session", "Turns", "Tokens", "Tool calls", "Redundant calls", "Skill calls", "Shell calls",
                      "Compaction", "Tasks", "Timeline"]  # upstream's order, then mur's Timeline
    assert "containment: advisory → scoped" in text and "workdir exec: no" in text
    assert "input:      260  (avg 87/turn)" in text and "output:     52  (avg 17/turn)" in text
    assert "fired:      yes  at turn 1  (9,000 → 800 tokens)" in text
    # per turn, per task: the calls, or the decision of a turn without one
    assert "\n  task 1\n  turn 0  bash 70ms ✓  {\"command\":\"ls -la xxx" in text
    assert "\n  turn 1  end_turn\n  task 2\n  turn 0  nope 1ms ✗  {}\n" in text
    assert "task 1  tsk_1  turns: 2  in: 250  out: 50  ok  410ms" in text
    assert "task 2  tsk_2  turns: 1  in: 10  out: 2  failed  151ms" in text
    lines = text.splitlines()
    timeline = lines[lines.index(next(l for l in lines if l.startswith("── Timeline"))) + 1:]
    assert len(timeline) == 16
    assert timeline[0].startswith("+0ms") and "a2a_task_received" in timeline[0]
    assert "tool_call" in timeline[4] and "bash  70ms  ✓" in timeline[4]
    assert "exit 0" in timeline[5] and "/usr/bin/bash" in timeline[5]
    assert timeline[-1].startswith("+1,151ms ") and "task_end" in timeline[-1]


def test_timeline_columns_never_run_together_and_show_no_python_values():
    events = session_events()
    late = events[-1]["timestamp"] + 123_456
    events.append({"event_type": "hook_dispatch_error", "session_id": "x", "timestamp": late, "hook_name": "audit",
                   "event": "on-tool-call", "arm": "error"})
    events.append({"event_type": "future_thing", "session_id": "x", "timestamp": late, "done": True, "gone": None,
                   "ratio": 0.5})
    text = render(summarize(events))
    lines = text.splitlines()
    timeline = lines[lines.index(next(l for l in lines if l.startswith("── Timeline"))) + 1:]
    # Every row: the offset, two spaces at least, the type, two spaces at least, the text.
    starts = {line.index(" " + line.split()[1]) for line in timeline}
    assert len(starts) == 1, timeline  # the type column starts at the same place on every row
    assert timeline[-2] == "+124,607ms  hook_dispatch_error  audit  on-tool-call  error"
    assert timeline[-1].split(None, 2)[2] == "done=yes  ratio=0.5"
    assert timeline[0].split(None, 2)[2] == ("tsk_1  context ctx_1  traceparent "
                                             "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    for word in ("None", "True", "False"):
        assert word not in text


def test_parse_errors(tmp_path: Path):
    bad = tmp_path / "trace.jsonl"
    bad.write_text('{"event_type":"session_start","timestamp":1}\n{oops\n')
    with pytest.raises(MurError) as err:
        load_events(bad)
    assert err.value.code == "E-TRC-001" and "line 2" in err.value.message
    bad.write_text('[1,2]\n')
    assert code_of(load_events, bad) == "E-TRC-001"
    assert code_of(summarize, []) == "E-TRC-001"
    no_end = [e for e in session_events() if e["event_type"] != "session_end"]
    assert code_of(summarize, no_end) == "E-TRC-001"
    no_start = [e for e in session_events() if e["event_type"] != "session_start"]
    assert code_of(summarize, no_start) == "E-TRC-001"


def test_unknown_event_types_are_listed_not_refused():
    events = session_events()
    events.insert(3, {"event_type": "future_thing", "session_id": "x", "timestamp": events[3]["timestamp"], "k": 1})
    s = summarize(events)
    assert any(r["event_type"] == "future_thing" and r["text"] == "k=1" for r in s["timeline"])


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_cli_show_human_and_json(workdir: Path, capsys):
    code, out, err = run_cli(["trace", "show", "--workdir", str(workdir)], capsys)
    assert code == 0, err
    assert f"session:    {IDS[2]}" in out and "── Timeline " in out
    code, out, _ = run_cli(["trace", "show", "0001", "--workdir", str(workdir), "--json"], capsys)
    assert code == 0 and len(out.splitlines()) == 1
    doc = json.loads(out)
    assert doc["session_id"] == IDS[0] and doc["trace"].endswith(f"{IDS[0]}/trace.jsonl")
    assert doc["timeline"][0]["event_type"] == "a2a_task_received"


def test_cli_errors_render_codes(workdir: Path, capsys):
    code, out, err = run_cli(["trace", "show", "aaaa", "--workdir", str(workdir)], capsys)
    assert (code, out) == (1, "") and err.startswith(
        "error[E-TRC-002]: ambiguous: 'aaaa' matches 2 sessions — provide more characters\n  ses_")
    (workdir / IDS[0] / "trace.jsonl").write_text("garbage\n")
    code, _, err = run_cli(["trace", "show", "@3", "--workdir", str(workdir)], capsys)
    assert code == 1 and err.startswith("error[E-TRC-001]:") and "line 1" in err


def test_session_directories_a_tool_could_have_planted_are_not_listed(tmp_path, monkeypatch):
    """In a --workdir a shell tool can write, `ses_*` entries may be its own: a link (to any directory)
    or, with mur as root, a directory owned by a session uid. Neither is a session."""
    import os

    import pytest

    from mur.ids import SESSION_UID_RANGES
    from mur.trace.sessions import list_sessions

    monkeypatch.setenv("HOME", str(tmp_path.parent / f"{tmp_path.name}-home"))  # no ~/.murmur/sessions of its own
    real = tmp_path / f"ses_{'0' * 31}1"
    real.mkdir()
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"ses_{'f' * 32}").symlink_to(elsewhere)
    assert list_sessions(tmp_path) == [real]
    if os.geteuid() != 0:
        pytest.skip("chowning to a session uid needs root")
    planted = tmp_path / ".murmur" / f"ses_{'e' * 32}"
    planted.mkdir(parents=True)
    os.chown(planted, SESSION_UID_RANGES[0][0] + 7, SESSION_UID_RANGES[0][0] + 7)
    assert list_sessions(tmp_path) == [real]


def test_shared_sessions_belong_to_a_capsules_own_workdir_only(tmp_path, home, monkeypatch):
    """`~/.murmur/sessions` holds the sessions of `mur run --workdir <manifest dir>/workdir`: reading that
    capsule's workdir lists them; any other workdir lists only what it holds (upstream's tests count on
    an empty one being empty, whatever ran before)."""
    from mur.trace.sessions import list_sessions

    shared = home / ".murmur" / "sessions" / IDS[0]
    shared.mkdir(parents=True)
    (shared / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in session_events()))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert list_sessions(elsewhere) == []
    assert code_of(resolve_trace, None, elsewhere) == "E-TRC-002"
    capsule = tmp_path / "capsule"
    (capsule / "workdir").mkdir(parents=True)
    (capsule / "murmur.yaml").write_text("name: c\nversion: 0.1.0\n")
    assert list_sessions(capsule / "workdir") == [shared]
    monkeypatch.chdir(capsule)  # `mur trace show` in the capsule directory: ./workdir
    assert list_sessions(Path("workdir")) == [shared]
    assert resolve_trace(None, Path("workdir")) == shared / "trace.jsonl"
