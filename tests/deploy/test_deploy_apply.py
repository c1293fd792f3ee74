"""Executing plans through a real Target (this machine's shell): atomic files, skips, links, refs."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mur.deploy.apply import apply_steps
from mur.deploy.steps import Mkdir, Run, Symlink, Upload, WriteFile
from mur.deploy.targets.local import LocalTarget


def src(tmp_path: Path, name: str, data: bytes) -> Upload:
    p = tmp_path / "src" / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return Upload(str(p), "", 0o644, hashlib.sha256(data).hexdigest(), len(data))


def test_first_apply_uploads_second_uploads_nothing(tmp_path):
    t = LocalTarget()
    dst = tmp_path / "dst"
    up = src(tmp_path, "a.bin", b"payload")
    steps = [Mkdir(str(dst / "d"), 0o700),
             Upload(up.src, str(dst / "d" / "a.bin"), 0o755, up.sha256, up.size, refs=str(dst / ".refs")),
             WriteFile(str(dst / "d" / "env"), b'K="v"\n', 0o600),
             Symlink("d", str(dst / "current")),
             Run(f"echo ran >> {dst}/log")]
    first = apply_steps(t, steps, dep_id="dep_1")
    assert first.uploaded == 1 and first.skipped == 0
    assert os.stat(dst / "d").st_mode & 0o777 == 0o700
    assert os.stat(dst / "d" / "a.bin").st_mode & 0o777 == 0o755
    assert os.stat(dst / "d" / "env").st_mode & 0o777 == 0o600
    assert os.readlink(dst / "current") == "d" and (dst / ".refs" / "dep_1").exists()
    second = apply_steps(t, steps, dep_id="dep_2")
    assert second.uploaded == 0 and second.skipped == 2 and second.written == []
    # an existing file someone else owns (no refs dir) is not claimed...
    assert (dst / ".refs" / "dep_2").exists()  # ...but this one was ours, so the new user is recorded
    assert (dst / "log").read_text() == "ran\nran\n"
    assert not [p for p in (dst / "d").iterdir() if "mur-tmp" in p.name]


def test_unchanged_files_are_linked_from_the_previous_release(tmp_path):
    t = LocalTarget()
    up = src(tmp_path, "m.yaml", b"name: x\n")
    old = tmp_path / "r1" / "m.yaml"
    old.parent.mkdir()
    old.write_bytes(b"name: x\n")
    (tmp_path / "r2").mkdir()
    stats = apply_steps(t, [Upload(up.src, str(tmp_path / "r2" / "m.yaml"), 0o644, up.sha256, up.size, alt=str(old))])
    assert stats.linked == 1 and stats.uploaded == 0
    assert os.stat(old).st_ino == os.stat(tmp_path / "r2" / "m.yaml").st_ino


def test_digests_in_one_round_trip(tmp_path):
    (tmp_path / "x").write_bytes(b"x")
    got = LocalTarget().digests([str(tmp_path / "x"), str(tmp_path / "missing")])
    assert got == {str(tmp_path / "x"): hashlib.sha256(b"x").hexdigest()}


def test_local_identity_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    t = LocalTarget()
    assert t.home == str(tmp_path) and t.uid == os.geteuid()
    res = t.run("exit 3", check=False)
    assert res.rc == 3
    import pytest

    from mur.errors import MurError

    with pytest.raises(MurError) as err:
        t.run("echo nope >&2; exit 4", what="thing")
    assert "thing failed (exit 4): nope" in err.value.message
