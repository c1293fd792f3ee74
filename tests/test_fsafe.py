"""mur.fsafe: every access beneath a Tree refuses links and ways out, with openat2 and with the
O_NOFOLLOW walk used where the kernel lacks it (both variants run every test)."""

from __future__ import annotations

import errno
import os

import pytest

from mur import fsafe
from mur.fsafe import LinkRefused, Tree


@pytest.fixture(params=["openat2", "walk"])
def tree(request, tmp_path, monkeypatch):
    if request.param == "openat2" and not fsafe.openat2_available():
        pytest.skip("no openat2 on this kernel")
    monkeypatch.setattr(fsafe, "_openat2_ok", request.param == "openat2")
    root = tmp_path / "root"
    root.mkdir()
    with Tree(root) as t:
        yield t


@pytest.fixture
def host(tmp_path):
    """A directory outside the tree standing in for a host file the runtime must never touch."""
    d = tmp_path / "host"
    d.mkdir()
    (d / "secret").write_text("host-secret\n")
    return d


def test_reads_and_writes_inside_the_tree_work(tree):
    tree.write_text("out/result.txt", "answer")
    assert tree.read_text("out/result.txt") == "answer"
    assert (tree.path / "out" / "result.txt").read_text() == "answer"
    tree.write_text("out/result.txt", "again")  # replaces
    assert tree.read_text("out/result.txt") == "again"
    assert sorted(os.listdir(tree.path / "out")) == ["result.txt"]  # no temp file left behind
    fd = tree.append("logs/a.log")
    os.write(fd, b"one\n")
    os.close(fd)
    fd = tree.append("logs/a.log")
    os.write(fd, b"two\n")
    os.close(fd)
    assert tree.read_text("logs/a.log") == "one\ntwo\n"


def test_a_symlink_is_never_followed_for_reading(tree, host):
    os.symlink(host / "secret", tree.path / "task.md")
    with pytest.raises(LinkRefused) as info:
        tree.read_text("task.md")
    assert info.value.errno == errno.ELOOP
    os.symlink(host, tree.path / "dir")
    with pytest.raises(LinkRefused):
        tree.read_text("dir/secret")


def test_paths_that_leave_the_tree_are_refused(tree):
    for rel in ("/etc/passwd", "../root/x", "a/../../x"):
        with pytest.raises(LinkRefused) as info:
            tree.read_text(rel)
        assert info.value.errno == errno.EXDEV


def test_a_hard_link_is_never_read_or_appended_through(tree, host):
    os.link(host / "secret", tree.path / "input.txt")
    with pytest.raises(LinkRefused) as info:
        tree.read_text("input.txt")
    assert info.value.errno == errno.EMLINK
    with pytest.raises(LinkRefused):
        tree.append("input.txt")
    assert (host / "secret").read_text() == "host-secret\n"


def test_writing_over_a_link_replaces_the_link_and_leaves_its_target_alone(tree, host):
    os.symlink(host / "secret", tree.path / "result.txt")
    os.link(host / "secret", tree.path / "hard.txt")
    tree.write_text("result.txt", "mine")
    tree.write_text("hard.txt", "mine")
    assert (host / "secret").read_text() == "host-secret\n"
    assert not os.path.islink(tree.path / "result.txt") and (tree.path / "result.txt").read_text() == "mine"
    assert os.stat(host / "secret").st_nlink == 1


def test_a_symlinked_directory_on_the_way_is_refused_for_writes_and_mkdir(tree, host):
    os.symlink(host, tree.path / "out")
    with pytest.raises(LinkRefused):
        tree.write_text("out/result.txt", "x")
    with pytest.raises(LinkRefused):
        tree.makedirs("out/sub")
    with pytest.raises(LinkRefused):
        tree.create("out/new.log")
    assert sorted(os.listdir(host)) == ["secret"]


def test_removal_removes_links_not_their_targets(tree, host):
    os.symlink(host / "secret", tree.path / "task.md")
    tree.unlink("task.md")
    assert not os.path.lexists(tree.path / "task.md") and (host / "secret").exists()
    (tree.path / "d" / "e").mkdir(parents=True)
    os.symlink(host, tree.path / "d" / "e" / "link")
    tree.remove_tree("d")
    assert not (tree.path / "d").exists() and (host / "secret").exists()
    tree.unlink("missing")  # missing is fine


def test_own_dir_replaces_a_link_by_the_directory(tree, host):
    os.symlink(host, tree.path / "tools")
    os.close(tree.own_dir("tools"))
    assert (tree.path / "tools").is_dir() and not os.path.islink(tree.path / "tools")
    assert sorted(os.listdir(host)) == ["secret"]


def test_walk_lists_links_without_following_them(tree, host):
    (tree.path / "a").mkdir()
    (tree.path / "a" / "f").write_text("x")
    os.symlink(host, tree.path / "a" / "hostdir")
    names = sorted(name for _fd, name, _st in tree.walk())
    assert names == [".", "a", "f", "hostdir"]


def test_subtree_and_lstat(tree, host):
    with tree.subtree("logs", create=True) as logs:
        logs.write_text("x.log", "1")
    assert tree.lstat("logs/x.log").st_size == 1
    assert tree.lstat("nope") is None
    os.symlink(host, tree.path / "ln")
    assert tree.lstat("ln") is not None  # the link itself
    with pytest.raises(LinkRefused):
        tree.subtree("ln")


def test_the_tree_root_itself_must_not_be_a_symlink(tmp_path, host):
    os.symlink(host, tmp_path / "link")
    with pytest.raises(LinkRefused):
        Tree(tmp_path / "link")


def test_crossing_a_mount_point_is_refused(monkeypatch):
    for variant in ((True,) if fsafe.openat2_available() else ()) + (False,):
        monkeypatch.setattr(fsafe, "_openat2_ok", variant)
        with Tree("/") as root, pytest.raises(LinkRefused) as info:
            root.read_text("proc/self/status")
        assert info.value.errno == errno.EXDEV


def test_inside():
    assert fsafe.inside("/a/b/c", "/a/b") and fsafe.inside("/a/b", "/a/b")
    assert not fsafe.inside("/a/bc", "/a/b") and not fsafe.inside("/a", "/a/b")


def test_a_swapped_write_replaces_a_file_and_leaves_no_temp(tmp_path):
    from mur.fsafe import write_atomic_at

    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic_at(fd, "result.txt", b"first", durable=False, swap=True)  # nothing to swap with: renamed
        inode = os.stat(tmp_path / "result.txt").st_ino
        write_atomic_at(fd, "result.txt", b"second", durable=False, swap=True)
        assert (tmp_path / "result.txt").read_bytes() == b"second" and os.stat(tmp_path / "result.txt").st_ino != inode
        (tmp_path / "sub").mkdir()
        with pytest.raises(IsADirectoryError):  # never swapped with a directory: the rename refuses it
            write_atomic_at(fd, "sub", b"x", durable=False, swap=True)
        os.symlink(tmp_path / "result.txt", tmp_path / "link")
        write_atomic_at(fd, "link", b"new", durable=False, swap=True)  # the link is replaced, not written through
        assert not os.path.islink(tmp_path / "link") and (tmp_path / "result.txt").read_bytes() == b"second"
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "result.txt", "sub"]
