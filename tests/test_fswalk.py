"""mur.fswalk: walking, measuring and removing a tree a tool made, at any depth, with a bounded
number of open fds, never through a link. Each shape here broke the recursive walk it replaced
(RecursionError near 1,000 levels; a path past PATH_MAX)."""

from __future__ import annotations

import os
import resource
import stat
import tempfile
import time
from pathlib import Path

import pytest

from mur import fsafe, fswalk

DEPTH = 5000  # the deep tree: well past Python's recursion limit and PATH_MAX


def _chain(root: str, depth: int, name: str = "d") -> None:
    """A directory chain `depth` deep below `root`, with a 1-byte file at every level (built by fd:
    its paths are longer than the kernel resolves at once)."""
    current = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=current)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=current)
            fd = os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=child)
            os.write(fd, b"x")
            os.close(fd)
            os.close(current)
            current = child
    finally:
        os.close(current)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    """One chain for the module, on a tmpfs where there is one (building and removing 5,000 levels
    costs seconds on a disk mounted with `discard`); the tests below only read it."""
    base = Path(tempfile.mkdtemp(dir="/dev/shm")) if os.access("/dev/shm", os.W_OK) else tmp_path_factory.mktemp("d")
    root = base / "deep"
    root.mkdir()
    _chain(str(root), DEPTH)
    yield root
    with fsafe.Tree(base.parent) as t:  # the test's own cleanup could not do it (shutil.rmtree recurses)
        t.remove_tree(base.name)


def test_a_tree_5000_levels_deep_is_walked_with_few_fds(deep):
    before = _open_fds()
    peak = 0
    count = 0
    with fsafe.Tree(deep) as tree:
        for step in fswalk.walk(tree.fd):
            count += 1
            if count % 997 == 0:
                peak = max(peak, _open_fds() - before)
    assert count == DEPTH * 3  # each level: enter, its file, leave
    assert peak <= 2 * fswalk.SHALLOW + fswalk.DEEP + 4
    assert _open_fds() == before


def test_usage_counts_blocks_of_every_inode_at_any_depth(deep):
    with fsafe.Tree(deep) as tree:
        found = fswalk.usage(tree.fd)
    assert found.complete and found.inodes == 1 + 2 * DEPTH
    assert found.bytes >= DEPTH * 2 * 512  # every directory and every file takes blocks


@pytest.fixture
def fast_tmp(tmp_path):
    """A tmpfs directory where there is one (/dev/shm): deep trees cost disk-bound seconds elsewhere."""
    if not os.access("/dev/shm", os.W_OK):
        yield tmp_path
        return
    base = Path(tempfile.mkdtemp(dir="/dev/shm"))
    yield base
    with fsafe.Tree(base.parent) as t:
        t.remove_tree(base.name)


def test_remove_tree_removes_it_all(fast_tmp):
    root = fast_tmp / "gone"
    root.mkdir()
    _chain(str(root), DEPTH)
    with fsafe.Tree(fast_tmp) as tree:
        tree.remove_tree("gone")
    assert not root.exists()


def test_usage_counts_what_st_size_hides(tmp_path):
    """fallocate(KEEP_SIZE)-like preallocation, sparse files and hard links: blocks, not sizes."""
    root = tmp_path / "t"
    root.mkdir()
    sparse = root / "sparse"
    with open(sparse, "wb") as fh:
        fh.truncate(1 << 30)  # 1 GiB of nothing: no blocks
    fd = os.open(root / "prealloc", os.O_WRONLY | os.O_CREAT)
    os.posix_fallocate(fd, 0, 1 << 20)
    os.close(fd)
    os.link(root / "prealloc", root / "again")
    with fsafe.Tree(root) as tree:
        found = fswalk.usage(tree.fd)
    assert (1 << 20) <= found.bytes < (1 << 20) + (256 << 10)  # the prealloc once, the sparse file ~nothing
    assert found.inodes == 3


def test_stop_above_and_deadline(deep):
    with fsafe.Tree(deep) as tree:
        early = fswalk.usage(tree.fd, stop_above=64 << 10)
        assert not early.complete and early.bytes > 64 << 10
        late = fswalk.usage(tree.fd, deadline=time.monotonic() - 1)
        assert not late.complete
        with pytest.raises(fswalk.WalkTimeout):
            list(fswalk.walk(tree.fd, deadline=time.monotonic() - 1))


def test_links_are_listed_never_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s")
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "link")
    os.symlink(outside / "secret", root / "flink")
    with fsafe.Tree(root) as tree:
        steps = [(s.kind, s.name) for s in fswalk.walk(tree.fd)]
        assert sorted(steps) == [("file", "flink"), ("file", "link")]
        tree.remove_tree("link")
    assert (outside / "secret").read_text() == "s"


def test_a_wide_directory_is_listed_lazily(tmp_path):
    root = tmp_path / "wide"
    root.mkdir()
    for i in range(3000):
        (root / f"f{i}").touch()
    with fsafe.Tree(root) as tree:
        assert fswalk.usage(tree.fd).inodes == 3001
        assert fswalk.remove_children(tree.fd) == 0
    assert os.listdir(root) == []


def test_a_moved_directory_stops_the_walk_instead_of_wandering(tmp_path, monkeypatch):
    """Past the fds a walk keeps, a level is reopened through '..': a directory moved meanwhile is
    caught by its inode, and the walk stops (Raced) rather than list another place."""
    monkeypatch.setattr(fswalk, "SHALLOW", 1)
    monkeypatch.setattr(fswalk, "DEEP", 1)
    root = tmp_path / "r"
    (root / "a" / "b" / "c" / "d").mkdir(parents=True)
    (root / "a" / "b" / "c" / "d" / "f").touch()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with fsafe.Tree(root) as tree:
        walker = fswalk.walk(tree.fd)
        with pytest.raises(fswalk.Raced):
            for step in walker:
                if step.kind == "file" and step.name == "f":  # the walk is in d; c's fd was given back
                    os.rename(root / "a" / "b" / "c" / "d", elsewhere / "d")  # d's '..' is elsewhere now


def test_under_a_low_fd_limit(deep):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 128), hard))
    try:
        with fsafe.Tree(deep) as tree:
            assert fswalk.usage(tree.fd).inodes == 1 + 2 * DEPTH
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_remove_entry_of_a_file_and_a_missing_name(tmp_path):
    (tmp_path / "f").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fswalk.remove_entry(fd, "f")
        fswalk.remove_entry(fd, "missing")
    finally:
        os.close(fd)
    assert not (tmp_path / "f").exists()
    assert stat.S_ISDIR(os.lstat(tmp_path).st_mode)
