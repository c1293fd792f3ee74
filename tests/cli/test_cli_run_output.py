"""`mur run`'s output, rendered by the CLI from what the runner reports (mur.session.reporter):
human lines on stderr and the answer alone on stdout; with --json one line first, one line last."""

from __future__ import annotations

import json
from pathlib import Path

from mur.cli.run import RESULT_INLINE_LIMIT, TerminalReporter
from mur.errors import MurError
from mur.session.reporter import Ending, Startup

START = Startup(url="http://127.0.0.1:7801", pid=4242, session_id="ses_1", name="hello", version="0.1.0",
                workdir=Path("/w/ses_1"), tools_workdir=Path("/w/ses_1/work"), driver=None, skills=2)
RESULT = Path("/w/ses_1/out/result.txt")


def test_human_startup_and_status_go_to_stderr_and_the_answer_to_stdout(capsys):
    reporter = TerminalReporter(json_out=False, verbose=False)
    reporter.started(START)
    reporter.ended(Ending("ok", "ses_1", "Hello, Ada!", RESULT))
    out, err = capsys.readouterr()
    assert err == "murmur: url http://127.0.0.1:7801\nsession: ses_1\nstatus:  ok\n"
    assert out == "Hello, Ada!\n"


def test_an_answer_keeps_its_own_final_newline(capsys):
    TerminalReporter(json_out=False, verbose=False).ended(Ending("ok", "ses_1", "two\nlines\n", RESULT))
    assert capsys.readouterr().out == "two\nlines\n"


def test_a_failed_session_prints_no_answer(capsys):
    error = MurError("E-RUN-007", "capsule run failed: boom")
    TerminalReporter(json_out=False, verbose=False).ended(Ending("failed", "ses_1", None, RESULT, error))
    out, err = capsys.readouterr()
    assert (out, err) == ("", "status:  failed\n")  # the CLI renders the error itself


def test_verbose_startup_names_workdir_manifest_driver_and_skills(capsys):
    TerminalReporter(json_out=False, verbose=True).started(START)
    assert capsys.readouterr().err == (
        "murmur: url http://127.0.0.1:7801\nsession: ses_1\nworkdir: /w/ses_1\ntools' workdir: /w/ses_1/work\nmanifest: hello v0.1.0\n"
        "driver: <none>\nskills: 2 installed\n"
    )


def test_waiting_for_a_task_names_the_url_and_the_timeout(capsys):
    reporter = TerminalReporter(json_out=False, verbose=False)
    reporter.waiting("localhost:7801", 30.0)
    reporter.waiting("localhost:7801", None)
    assert capsys.readouterr().err == (
        'waiting up to 30s for an A2A task: mur send localhost:7801 "<task>"  (MURMUR_A2A_TIMEOUT_SECS sets the wait)\n'
        'waiting with no time limit for an A2A task: mur send localhost:7801 "<task>"  '
        "(MURMUR_A2A_TIMEOUT_SECS sets the wait)\n"
    )


def test_json_is_the_startup_line_then_the_ending_line_and_nothing_on_stderr(capsys):
    reporter = TerminalReporter(json_out=True, verbose=True)
    reporter.started(START)
    reporter.waiting("localhost:7801", 30.0)
    with reporter.activity("compiling tool 'greet'"):
        pass
    reporter.ended(Ending("ok", "ses_1", "Hello, Ada!\n", RESULT))
    out, err = capsys.readouterr()
    first, last = out.splitlines()
    assert json.loads(first) == {"url": "http://127.0.0.1:7801", "pid": 4242, "session_id": "ses_1", "name": "hello",
                                 "version": "0.1.0", "workdir": "/w/ses_1"}
    assert json.loads(last) == {"status": "ok", "session_id": "ses_1", "result": "Hello, Ada!\n",
                                "result_path": str(RESULT)}
    assert err == ""


def test_json_ending_of_a_failed_session_carries_the_error(capsys):
    error = MurError("E-RUN-001", "capsule execution trapped: boom", "a hint")
    TerminalReporter(json_out=True, verbose=False).ended(Ending("trapped", "ses_1", None, RESULT, error))
    assert json.loads(capsys.readouterr().out) == {
        "status": "trapped", "session_id": "ses_1", "result": None, "result_path": str(RESULT),
        "error": {"code": "E-RUN-001", "message": "capsule execution trapped: boom"}}


def test_json_ending_leaves_a_large_answer_in_its_file(capsys):
    big = "x" * (RESULT_INLINE_LIMIT + 1)
    TerminalReporter(json_out=True, verbose=False).ended(Ending("ok", "ses_1", big, RESULT))
    line = json.loads(capsys.readouterr().out)
    assert line["result"] is None and line["result_path"] == str(RESULT)


def test_interrupted_is_one_status_line(capsys):
    reporter = TerminalReporter(json_out=False, verbose=False)
    reporter.ended(Ending("interrupted", "ses_1", None, None))
    assert capsys.readouterr() == ("", "status:  interrupted\n")
    assert reporter.told_interrupt
