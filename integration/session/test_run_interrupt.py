"""Ctrl-C at a real `mur run`, and what it shows while it waits: a terminal's SIGINT to the whole
process group, exit 130, one line about it on stderr, the trace flushed, nothing half-written."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from mur.testing.terminal import MurProcess
from session_support import mur_env, read_trace, session_dirs

ROOT = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def screen(text: str) -> list[str]:
    """Every line a terminal drew, redrawn ones too (escape codes gone, a carriage return ends a line)."""
    return [line.strip() for line in ANSI.sub("", text).replace("\r", "\n").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def capsule_probe_wasm(componentize_py) -> Path:
    """tests/wasm's capsule guest: {"op": "loop"} in task.md spins in compiled code."""
    from mur.wasm.build import build_component

    return build_component(ROOT / "tests" / "wasm" / "guests" / "capsule_probe", "capsule")


def test_ctrl_c_while_a_plain_capsule_computes_ends_the_task_interrupted(capsule_probe_wasm, home, tmp_path):
    capsule = tmp_path / "busy"
    capsule.mkdir()
    shutil.copyfile(capsule_probe_wasm, capsule / "capsule.wasm")
    (capsule / "murmur.yaml").write_text('name: busy\nversion: "0.1.0"\n'
                                         "capabilities:\n  limits:\n    deadline_seconds: 300\n")
    with MurProcess("run", "--json", "-t", json.dumps({"op": "loop"}), cwd=capsule, env=mur_env(home)) as mur:
        mur.wait_for(lambda: mur.stdout.count("\n") >= 1, what="the startup line")
        session = Path(json.loads(mur.stdout.splitlines()[0])["workdir"])
        mur.wait_for(lambda: '"session_start"' in (session / "trace.jsonl").read_text(), what="session_start")
        mur.ctrl_c()
        assert mur.finish(60) == 130  # the guest never returns on its own: its deadline is 300 s
    first, last = mur.stdout.splitlines()
    assert json.loads(last) == {"status": "interrupted", "session_id": session.name, "result": None,
                                "result_path": str(session / "out" / "result.txt")}
    assert mur.stderr == "interrupted\n"
    events = read_trace(session / "trace.jsonl")
    assert [e["event_type"] for e in events] == ["task_start", "session_start", "session_end", "task_end"]
    assert events[2]["exit_status"] == events[3]["exit_status"] == "interrupted"
    assert (session / "out" / "result.txt").read_text() == "error: interrupted: the capsule received SIGINT (Ctrl-C)"


def test_ctrl_c_while_waiting_for_an_a2a_task(hello, home):
    with MurProcess("run", cwd=hello, env=mur_env(home, MURMUR_A2A_TIMEOUT_SECS="60")) as mur:
        mur.wait_for(lambda: "waiting" in mur.stderr, what="the waiting line")
        mur.ctrl_c()
        assert mur.finish(30) == 130
    lines = mur.stderr.splitlines()
    url = lines[0].removeprefix("murmur: url ")
    assert lines[2:] == [
        f'waiting up to 60s for an A2A task: mur send {url} "<task>"  (MURMUR_A2A_TIMEOUT_SECS sets the wait)',
        "status:  interrupted",
    ]
    assert mur.stdout == ""
    [session] = session_dirs(hello)
    assert read_trace(session / "trace.jsonl") == []  # no task ran


@pytest.mark.parametrize("tty", [True, False], ids=["terminal", "pipe"])
def test_ctrl_c_during_a_cold_compile_leaves_nothing_behind(built_hello, home, tmp_path, tty):
    """A new component compiles optimized for 40-70 s here (tiering off: the fast tier would be done
    in a second or two): a terminal sees a spinner naming it with the time spent, a pipe sees
    nothing; Ctrl-C ends the run at once, with no cache entry and no session."""
    hello = tmp_path / "hello"
    shutil.copytree(built_hello, hello, ignore=shutil.ignore_patterns("workdir", "__pycache__", ".murmur"))
    cache = tmp_path / "cache"  # empty: every component compiles
    env = mur_env(home, MUR_CACHE_DIR=str(cache), MUR_WASM_TIERING="off")
    with MurProcess("run", "-t", "Ada", cwd=hello, env=env, tty=tty) as mur:
        if tty:
            mur.wait_for(lambda: "compiling 2 components (tool 'greet', capsule)" in mur.stderr,
                         what="the compile spinner")  # both compile at once, under one spinner
        else:
            mur.wait_for((cache / "wasm").is_dir, what="the compile")
        mur.ctrl_c()
        assert mur.finish(30) == 130
    shown = screen(mur.stderr)
    if tty:
        assert any(re.search(r"compiling 2 components \(tool 'greet', capsule\) .*0:00:\d\d", line)
                   for line in shown), shown
    assert shown[-1] == "interrupted" and (tty or mur.stderr == "interrupted\n"), shown
    assert mur.stdout == ""
    assert list((cache / "wasm").iterdir()) == []  # no compiled component, no half-written temp file
    assert not (cache / "payloads").exists()  # no private copy of a payload was ever made
    assert session_dirs(hello) == []  # the session never served: its directory is gone
