"""`mur run`'s stdout, rendered by the CLI from what the runner reports (mur.session.reporter)."""

from __future__ import annotations

from pathlib import Path

from mur.cli.run import TerminalReporter
from mur.session.reporter import Startup

START = Startup(url="http://127.0.0.1:7801", pid=4242, session_id="ses_1", name="hello", version="0.1.0",
                workdir=Path("/w/ses_1"), tools_workdir=Path("/w/ses_1/work"), driver=None, skills=2)


def test_human_startup_and_status(capsys):
    reporter = TerminalReporter(json_out=False, verbose=False)
    reporter.started(START)
    reporter.ended("ok")
    assert capsys.readouterr().out == "murmur: url http://127.0.0.1:7801\nsession: ses_1\nstatus:  ok\n"


def test_verbose_startup_names_workdir_manifest_driver_and_skills(capsys):
    TerminalReporter(json_out=False, verbose=True).started(START)
    assert capsys.readouterr().out == (
        "murmur: url http://127.0.0.1:7801\nsession: ses_1\nworkdir: /w/ses_1\ntools' workdir: /w/ses_1/work\nmanifest: hello v0.1.0\n"
        "driver: <none>\nskills: 2 installed\n"
    )


def test_json_is_one_line_and_no_status(capsys):
    reporter = TerminalReporter(json_out=True, verbose=True)
    reporter.started(START)
    reporter.ended("failed")
    assert capsys.readouterr().out == (
        '{"url":"http://127.0.0.1:7801","pid":4242,"session_id":"ses_1","name":"hello","version":"0.1.0",'
        '"workdir":"/w/ses_1"}\n'
    )
