"""`mur trace show|steps|diff|report -m MANIFEST` reads the sessions `mur run -m MANIFEST` wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


SID = "ses_019f01a940ce7761854e768ecbe3d399"


def _project(root: Path) -> Path:
    """root/proj/murmur.yaml with one finished session in proj/workdir/."""
    proj = root / "proj"
    session = proj / "workdir" / SID
    session.mkdir(parents=True)
    (proj / "murmur.yaml").write_text('name: hello\nversion: "0.1.0"\n')
    events = [
        {"event_type": "session_start", "session_id": SID, "timestamp": 1_760_000_000_000,
         "capsule_name": "hello", "capsule_version": "0.1.0"},
        {"event_type": "session_end", "session_id": SID, "timestamp": 1_760_000_000_500, "total_turns": 0,
         "duration_ms": 500, "exit_status": "ok"},
    ]
    (session / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return proj


@pytest.mark.parametrize("given", ["proj/murmur.yaml", "proj"])
def test_trace_show_finds_the_manifests_workdir(tmp_path, monkeypatch, cli, given):
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)  # no ./workdir here: only -m can find the session
    code, out, err = cli("trace", "show", "-m", given, "--json")
    assert (code, err) == (0, "")
    assert json.loads(out)["session_id"] == SID
    code, out, _ = cli("trace", "report", "-m", given, "--json")
    assert code == 0 and json.loads(out)["sessions"][0]["session_id"] == SID


def test_trace_without_manifest_still_reads_dot_workdir(tmp_path, monkeypatch, cli):
    _project(tmp_path)
    monkeypatch.chdir(tmp_path / "proj")
    code, out, _ = cli("trace", "show", "--json")
    assert code == 0 and json.loads(out)["session_id"] == SID


def test_trace_manifest_refusals(tmp_path, monkeypatch, cli):
    _project(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("trace", "show", "-m", "nope.yaml")
    assert (code, err.splitlines()[0]) == (1, "error[E-IO-001]: manifest not found: nope.yaml")
    code, _, err = cli("trace", "show", "-m", "proj", "--workdir", "proj/workdir")
    assert code == 2 and "give --workdir or --manifest, not both" in err
