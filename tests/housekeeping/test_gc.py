"""`mur gc`: old sessions and unused compiled components, reported (dry run) then removed with --yes.

Real files with real mtimes in a temp HOME and project; the in-use check reads the real /proc of a
real child process that keeps a file of a session open."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mur.housekeeping.gc import open_paths, plan_gc
from mur.wasm.engine import engine_fingerprint

DAY = 86400
OLD, NEW = "ses_" + "0" * 31 + "1", "ses_" + "0" * 31 + "2"


def _aged(path: Path, days: float) -> Path:
    stamp = time.time() - days * DAY
    os.utime(path, (stamp, stamp))
    return path


def _file(path: Path, data: bytes, days: float) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return _aged(path, days)


def _session(root: Path, sid: str, days: float) -> Path:
    """A session of 1000 + 3 bytes whose trace was last written `days` ago."""
    _file(root / sid / "out" / "result.txt", b"x" * 1000, days)
    _file(root / sid / "trace.jsonl", b"{}\n", days)
    return root / sid


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A project with an old and a new session, and a cache with stale and fresh entries."""
    home, proj = tmp_path / "home", tmp_path / "proj"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("MUR_CACHE_DIR", raising=False)
    proj.mkdir()
    monkeypatch.chdir(proj)
    (proj / "murmur.yaml").write_text('name: p\nversion: "1"\n')
    _session(proj / "workdir", OLD, 10)
    _session(proj / "workdir", NEW, 1)
    wasm = home / ".murmur" / "cache" / "wasm"
    fp = engine_fingerprint()
    other = "f" * 16 if fp != "f" * 16 else "e" * 16
    for name, days in ((f"{'a' * 64}.{fp}.cwasm", 30), (f"{'b' * 64}.{fp}.cwasm", 1),
                       (f"{'c' * 64}.{other}.cwasm", 0), ("notes.txt", 90), (f".{'d' * 64}.{fp}.cwasm.1.2.tmp", 1)):
        _file(wasm / name, b"w" * 100, days)
    _file(home / ".murmur" / "cache" / "components" / ("1" * 32) / "tool.wasm", b"b" * 50, 20)
    return tmp_path


def test_dry_run_reports_and_touches_nothing(world, cli):
    code, out, err = cli("gc", "--json")
    assert (code, err) == (0, "")
    result = json.loads(out)
    found = {(i["kind"], Path(i["path"]).name, i["reason"]) for i in result["items"]}
    assert found == {
        ("session", OLD, "last written 10d ago"),
        ("compiled", f"{'a' * 64}.{engine_fingerprint()}.cwasm", "not loaded for 30d"),
        ("compiled", next(p.name for p in (world / "home/.murmur/cache/wasm").glob("c*.cwasm")),
         "compiled for another wasmtime or engine setting"),
        ("compiled", f".{'d' * 64}.{engine_fingerprint()}.cwasm.1.2.tmp", "left behind by an interrupted write"),
        ("built", "1" * 32, "not reused for 20d"),
    }
    assert result["dry_run"] is True and result["removed"] == 0
    assert result["total_bytes"] == 1003 + 100 * 3 + 50
    assert (world / "proj/workdir" / OLD).is_dir()  # nothing removed
    code, out, _ = cli("gc")
    assert out.splitlines()[-1].startswith("Would free ") and "run again with --yes" in out


def test_yes_removes_exactly_the_report(world, cli):
    code, out, _ = cli("gc", "--yes")
    assert code == 0 and out.splitlines()[-1].startswith("Removed 5 items, freed ")
    assert sorted(p.name for p in (world / "proj/workdir").iterdir()) == [NEW]
    left = sorted(p.name for p in (world / "home/.murmur/cache/wasm").iterdir())
    assert left == sorted([f"{'b' * 64}.{engine_fingerprint()}.cwasm", "notes.txt"])
    assert not (world / "home/.murmur/cache/components" / ("1" * 32)).exists()
    code, out, _ = cli("gc", "--yes")
    assert out == "Nothing to remove (no session or compiled component unused for 7d).\n"


def test_older_than_and_manifest_select(world, cli, monkeypatch):
    monkeypatch.chdir(world)  # no ./workdir here: -m names the capsule
    code, out, _ = cli("gc", "-m", "proj", "--older-than", "12h", "--json")
    sessions = sorted(Path(i["path"]).name for i in json.loads(out)["items"] if i["kind"] == "session")
    assert sessions == [OLD, NEW]
    code, _, err = cli("gc", "--older-than", "soon")
    assert code == 2 and "is not a duration" in err


def test_a_session_a_process_has_open_is_kept(world, cli):
    held = world / "proj/workdir" / OLD / "trace.jsonl"
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); print(1, flush=True); "
                              "time.sleep(60)", str(held)], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()
        assert str(held) in open_paths()
        code, out, _ = cli("gc", "--yes", "--json")
        result = json.loads(out)
        assert result["in_use"] == [str(world / "proj/workdir" / OLD)]
        assert (world / "proj/workdir" / OLD).is_dir()
    finally:
        child.kill()
        child.wait()


def test_symlinks_are_never_followed(world, tmp_path):
    elsewhere = tmp_path / "precious"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("keep")
    link = world / "proj/workdir" / ("ses_" + "9" * 32)
    link.symlink_to(elsewhere, target_is_directory=True)
    plan = plan_gc([world / "proj/workdir"], world / "home/.murmur/cache", older_than=0, fingerprint="x" * 16,
                   opened=set())
    assert link not in [i.path for i in plan.items]
    assert (elsewhere / "keep.txt").exists()


def test_both_tiers_entries_are_current_and_unused_kept_sources_go(home, cli, tmp_path, monkeypatch):
    from mur.wasm.engine import FAST

    monkeypatch.delenv("MUR_CACHE_DIR", raising=False)  # (integration/deploy's conftest sets it when collected too)
    monkeypatch.chdir(tmp_path)
    wasm = home / ".murmur" / "cache" / "wasm"
    fast = f"{'a' * 64}.{engine_fingerprint(FAST)}.cwasm"
    for name, days in ((fast, 1), (f"{'e' * 64}.wasm", 30), (f"{'f' * 64}.wasm", 1)):
        _file(wasm / name, b"w" * 100, days)
    code, out, _ = cli("gc", "--json")
    found = {(i["kind"], Path(i["path"]).name, i["reason"]) for i in json.loads(out)["items"]}
    assert found == {("compiled", f"{'e' * 64}.wasm", "source not used for 30d")}  # the fast entry is current
