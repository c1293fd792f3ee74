"""The session disk's image: mkfs once per plan, then a copy of that image (the template) for every
later session, trusted only where nobody else could have written it (the kernel parses it as root)."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess

import pytest

from mur.sandbox import disk as dsk
from mur.sandbox.diskplan import DiskFacts, plan_disk

pytestmark = pytest.mark.skipif(dsk.mkfs_path() is None, reason="mkfs.ext4 (e2fsprogs) is not installed")
FACTS = DiskFacts(mount_ns=True, loop=True, tmpfs=True, memory_total=8 << 30, memory_bound=1 << 30)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MUR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / dsk.TEMPLATES


@pytest.fixture
def mkfs_runs(monkeypatch):
    runs = []
    real = subprocess.run

    def counting(argv, *a, **kw):
        if os.path.basename(argv[0]) == "mkfs.ext4":
            runs.append(argv)
        return real(argv, *a, **kw)

    monkeypatch.setattr(dsk.subprocess, "run", counting)
    return runs


def image(plan, where):
    path, fd = dsk.make_image(plan, where)
    os.close(fd)
    return path


def fsck_clean(path) -> bool:
    fsck = shutil.which("e2fsck", path="/usr/sbin:/sbin")
    return fsck is None or subprocess.run([fsck, "-fn", str(path)], capture_output=True).returncode == 0


def test_the_first_image_is_formatted_and_kept_the_next_ones_are_copies(tmp_path, cache, mkfs_runs):
    plan = plan_disk(64 << 20, FACTS, root=True)
    first = image(plan, tmp_path / "s1")
    assert len(mkfs_runs) == 1
    kept = list(cache.iterdir())
    assert len(kept) == 1 and kept[0].name.startswith("ext4-") and oct(kept[0].stat().st_mode & 0o777) == "0o600"
    second = image(plan, tmp_path / "s2")
    assert len(mkfs_runs) == 1, "the second image ran mkfs again"
    assert second.stat().st_size == plan.image_bytes and filecmp.cmp(first, second, shallow=False)
    assert second.stat().st_blocks * 512 < 4 << 20, "the copy is not sparse"
    assert fsck_clean(second)
    other = plan_disk(128 << 20, FACTS, root=True)  # another size: its own template
    image(other, tmp_path / "s3")
    assert len(mkfs_runs) == 2 and len(list(cache.iterdir())) == 2


@pytest.mark.parametrize("spoil", ["group-writable file", "group-writable dir", "symlink", "wrong size"])
def test_a_template_anyone_else_could_have_written_is_never_copied(tmp_path, cache, mkfs_runs, spoil):
    plan = plan_disk(64 << 20, FACTS, root=True)
    image(plan, tmp_path / "s1")
    (kept,) = cache.iterdir()
    if spoil == "group-writable file":
        kept.chmod(0o620)
    elif spoil == "group-writable dir":
        cache.chmod(0o770)
    elif spoil == "symlink":
        real = tmp_path / "elsewhere.img"
        kept.rename(real)
        kept.symlink_to(real)
    elif spoil == "wrong size":
        os.truncate(kept, plan.image_bytes + 4096)
    made = image(plan, tmp_path / "s2")
    assert len(mkfs_runs) == 2, f"a {spoil} template was used"
    assert fsck_clean(made)


def test_a_cache_others_can_write_gets_no_template_and_every_image_is_formatted(tmp_path, monkeypatch, mkfs_runs):
    shared = tmp_path / "cache" / dsk.TEMPLATES
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    monkeypatch.setenv("MUR_CACHE_DIR", str(tmp_path / "cache"))
    plan = plan_disk(64 << 20, FACTS, root=True)
    image(plan, tmp_path / "s1")
    image(plan, tmp_path / "s2")
    assert len(mkfs_runs) == 2 and not list(shared.iterdir())
