"""mur.sandbox.mirror: the tools' tree onto the session disk and back, between two plain directories
(the disk is any directory here: what is under test is what crosses, not the mount)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from mur import fsafe
from mur.sandbox import mirror


@pytest.fixture
def trees(tmp_path):
    if os.access("/dev/shm", os.W_OK):  # deep trees cost disk-bound seconds elsewhere
        tmp_path = Path(tempfile.mkdtemp(dir="/dev/shm"))
    host, disk = tmp_path / "host", tmp_path / "disk"
    host.mkdir()
    disk.mkdir()
    fds = [os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in (host, disk)]
    yield host, disk, fds[0], fds[1]
    for fd in fds:
        os.close(fd)
    with fsafe.Tree(tmp_path.parent) as t:
        t.remove_tree(tmp_path.name)


def _deep(root, depth: int) -> None:
    current = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=current)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
        os.close(current)
        current = nxt
    os.close(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=current))
    os.close(current)


def test_copy_in_takes_files_dirs_links_and_leaves_what_could_deputize(trees):
    host, disk, hfd, dfd = trees
    tmp_path = host.parent
    (host / "sub").mkdir()
    (host / "sub" / "a.txt").write_text("a")
    os.chmod(host / "sub" / "a.txt", 0o4755)
    secret = tmp_path / "secret"
    secret.write_text("root-only")
    os.link(secret, host / "hardlink")  # another name may be outside: never read through it
    os.symlink("/etc/shadow", host / "link")
    os.mkfifo(host / "fifo")  # opening it would block the runtime
    with open(host / "sparse", "wb") as fh:
        fh.truncate(1 << 30)
        fh.seek(1 << 20)
        fh.write(b"data")
    snap = mirror.copy_in(hfd, dfd)
    assert sorted(os.listdir(disk)) == ["link", "sparse", "sub"]
    assert (disk / "sub" / "a.txt").read_text() == "a"
    assert stat.S_IMODE(os.stat(disk / "sub" / "a.txt").st_mode) == 0o755  # setuid dropped
    assert os.readlink(disk / "link") == "/etc/shadow"  # the link, never what it points to
    assert os.stat(disk / "sparse").st_size == 1 << 30 and os.stat(disk / "sparse").st_blocks < 1024  # holes kept
    assert any("hardlink" in n for n in snap.notes) and any("fifo" in n for n in snap.notes)


def test_copy_out_brings_changes_back_and_removes_only_what_is_unchanged(trees):
    host, disk, hfd, dfd = trees
    for name in ("keep", "change", "gone", "theirs"):
        (host / name).write_text(name)
    (host / "olddir").mkdir()
    (host / "olddir" / "f").write_text("f")
    snap = mirror.copy_in(hfd, dfd)
    (disk / "change").write_text("changed by a tool")
    os.unlink(disk / "gone")
    os.unlink(disk / "theirs")
    os.unlink(disk / "olddir" / "f")
    os.rmdir(disk / "olddir")
    (disk / "new").mkdir()
    (disk / "new" / "made").write_text("made")
    (host / "theirs").write_text("the user changed it during the session")  # not removed: not what was copied
    report = mirror.copy_out(dfd, hfd, snap)
    assert (host / "change").read_text() == "changed by a tool"
    assert (host / "new" / "made").read_text() == "made"
    assert not (host / "gone").exists() and not (host / "olddir").exists()
    assert (host / "theirs").read_text() == "the user changed it during the session"
    assert (host / "keep").read_text() == "keep"
    assert report.copied == 2 and report.removed == 2


def test_copy_out_never_writes_through_a_link_on_the_host(trees):
    host, disk, hfd, dfd = trees
    tmp_path = host.parent
    victim = tmp_path / "victim"
    victim.write_text("host file")
    snap = mirror.copy_in(hfd, dfd)
    os.symlink(victim, host / "out")  # someone plants a link on the host meanwhile
    (disk / "out").write_text("tool output")
    report = mirror.copy_out(dfd, hfd, snap)
    assert victim.read_text() == "host file"
    # a name copy-in did not bring is written only where the host has nothing: the planted link
    # stays as it is (never written through), and the report says what was left on the disk
    assert os.readlink(host / "out") == str(victim)
    assert report.skipped_count == 1 and report.skipped[0].startswith("out:")


def test_deep_trees_cross_both_ways(trees):
    host, disk, hfd, dfd = trees
    _deep(str(host), 5000)
    snap = mirror.copy_in(hfd, dfd)
    assert len(snap.entries) == 5001
    with fsafe.Tree(disk) as d:
        d.remove_tree("d")
    _deep(str(disk), 6000)
    report = mirror.copy_out(dfd, hfd, snap)
    assert report.copied == 1  # the new leaf (the directories are made on the way)


def test_the_copy_out_budget_caps_hard_link_amplification(trees):
    host, disk, hfd, dfd = trees
    snap = mirror.copy_in(hfd, dfd)
    (disk / "big").write_bytes(b"x" * 4096)
    for i in range(50):
        os.link(disk / "big", disk / f"link{i}")
    report = mirror.copy_out(dfd, hfd, snap, budget=10 * 4096)
    assert report.bytes <= 10 * 4096 and report.skipped_count >= 40


def test_a_full_disk_is_disk_full(trees, monkeypatch):
    host, disk, hfd, dfd = trees
    (host / "f").write_text("x" * 10)

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mirror, "_copy_data", full)
    with pytest.raises(mirror.DiskFull):
        mirror.copy_in(hfd, dfd)
