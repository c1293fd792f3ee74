"""The session layout (the runtime's record never beneath the tools' workdir) and the task input read
without following links (staging: test_session_staging.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mur.errors import MurError
from mur.session.workdir import create_workdir, plan_workdir, write_task_input

SES = "ses_" + "0" * 31 + "1"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MUR_CACHE_DIR", str(tmp_path / "home" / ".murmur" / "cache"))


def test_default_layout_nests_the_tools_workdir_in_the_session_directory(tmp_path):
    wd = plan_workdir(tmp_path / "capsule", SES, None)
    assert wd.session == (tmp_path / "capsule" / "workdir" / SES).resolve()
    assert wd.accessible == wd.session / "work"
    assert (wd.trace, wd.logs, wd.result) == (wd.session / "trace.jsonl", wd.session / "logs", wd.session / "out" / "result.txt")
    assert (wd.tools, wd.murmur_md) == (wd.accessible / "tools", wd.accessible / "MURMUR.md")
    create_workdir(wd)
    assert sorted(p.name for p in wd.session.iterdir()) == ["logs", "out", "work"]
    assert sorted(p.name for p in wd.accessible.iterdir()) == ["tools"]


def test_with_workdir_the_session_directory_stays_outside_it(tmp_path):
    capsule, work = tmp_path / "capsule", tmp_path / "work"
    wd = plan_workdir(capsule, SES, work)
    assert (wd.accessible, wd.session) == (work.resolve(), (capsule / "workdir" / SES).resolve())
    inner = plan_workdir(capsule, SES, capsule / "workdir")  # would put the session inside the workdir
    assert inner.session == tmp_path / "home" / ".murmur" / "sessions" / SES


def test_with_workdir_a_read_only_capsule_directory_keeps_the_session_under_home(tmp_path, monkeypatch):
    capsule = tmp_path / "capsule"
    capsule.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == capsule else real(p, mode))
    wd = plan_workdir(capsule, SES, tmp_path / "work")  # an image's /capsule is read-only at run time
    assert wd.session == tmp_path / "home" / ".murmur" / "sessions" / SES
    assert plan_workdir(tmp_path / "elsewhere", SES, tmp_path / "work").session.parent.name == "workdir"


@pytest.mark.parametrize("which", ["manifest", "home", "cache"])
def test_a_workdir_holding_what_later_runs_load_is_refused(tmp_path, monkeypatch, which):
    capsule = tmp_path / "proj" / "capsule"
    if which == "cache":
        monkeypatch.setenv("MUR_CACHE_DIR", str(tmp_path / "shared" / "cache"))
    work = {"manifest": tmp_path / "proj", "home": tmp_path / "home", "cache": tmp_path / "shared"}[which]
    with pytest.raises(MurError) as info:
        plan_workdir(capsule, SES, work)
    assert info.value.code == "E-IO-002" and info.value.message.startswith(f"--workdir {work.resolve()} contains")
    os.makedirs(tmp_path / "real")
    os.symlink(tmp_path / "real", tmp_path / "alias")  # the same directory through a link is caught too
    monkeypatch.setenv("HOME", str(tmp_path / "real" / "home"))
    with pytest.raises(MurError):
        plan_workdir(capsule, SES, tmp_path / "alias")


def test_the_task_is_read_once_and_never_through_a_link(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root-only")
    wd = plan_workdir(tmp_path / "capsule", SES, tmp_path / "work")
    create_workdir(wd)
    os.symlink(secret, wd.accessible / "task.md")
    with pytest.raises(MurError) as info:
        write_task_input(wd, None)
    assert info.value.code == "E-IO-002" and "task.md" in info.value.message
    assert "root-only" not in info.value.render()
    assert write_task_input(wd, "literal task") == "literal task"  # --task replaces the link itself
    assert not (wd.accessible / "task.md").is_symlink() and secret.read_text() == "root-only"
    (wd.accessible / "task.md").unlink()
    os.link(secret, wd.accessible / "input.txt")
    with pytest.raises(MurError, match="hard link"):
        write_task_input(wd, None)
    (wd.accessible / "input.txt").unlink()
    assert write_task_input(wd, None) is None
    source = tmp_path / "t.md"
    source.write_text("from a file")
    assert write_task_input(wd, str(source)) == "from a file"
