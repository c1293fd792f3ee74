"""The kernel probe's disk cache (mur.sandbox.probecache): read back under the same key, and only
from a file nobody else could have written. A "doctored" file (a valid key, a landlock_abi no
kernel reports) tells a read answer from a measured one."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mur.sandbox import probe, probecache

pytestmark = pytest.mark.skipif(not Path(probecache.BOOT_ID).exists(), reason="needs Linux's boot id")

DOCTORED = 99


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MUR_CACHE_DIR", raising=False)
    monkeypatch.delenv(probecache.ENV, raising=False)
    monkeypatch.setattr(probe, "_cache", None)
    return tmp_path


def cache_dir(home: Path) -> Path:
    return home / ".murmur" / "cache" / "probe"


def cache_file(home: Path) -> Path:
    return cache_dir(home) / probecache.file_name(probecache.key())


def fresh() -> probe.HostProbe:
    """probe_host() as a new process would call it (the per-process cache emptied)."""
    probe._cache = None
    return probe.probe_host()


def doctor(path: Path, **key_changes) -> None:
    data = json.loads(path.read_text())
    data["probe"]["landlock_abi"] = DOCTORED
    data["key"].update(key_changes)
    path.write_text(json.dumps(data))
    os.chmod(path, 0o600)


def test_the_first_probe_writes_a_private_cache_and_the_next_reads_it(home):
    measured = probe.probe_host()
    path = cache_file(home)
    assert stat.S_IMODE(os.stat(cache_dir(home)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.loads(path.read_text())
    assert data["key"] == probecache.key() and data["probe"]["landlock_abi"] == measured.landlock_abi
    doctor(path)
    assert fresh().landlock_abi == DOCTORED
    out = subprocess.run([sys.executable, "-m", "mur.sandbox.probe"], capture_output=True, text=True, check=True,
                         env={**os.environ, "HOME": str(home)}, timeout=60)
    assert json.loads(out.stdout)["landlock_abi"] == DOCTORED  # another process reads it too


@pytest.mark.parametrize("change", [{"boot_id": "another-boot"}, {"kernel": "0.0.0"}, {"cgroup": "0::/elsewhere"},
                                    {"uid": 12345}, {"mur": "0.0.0"}, {"schema": probecache.SCHEMA + 1},
                                    # a limit or an owner on the cgroup's path changed in place (E-RUN-012's fix)
                                    {"cgroup_path": [["/sys/fs/cgroup", False, None, None, ["1048576", None, None]]]}])
def test_a_cache_measured_under_another_key_is_measured_again(home, change):
    real = probe.probe_host().landlock_abi
    doctor(cache_file(home), **change)
    assert fresh().landlock_abi == real
    assert json.loads(cache_file(home).read_text())["key"] == probecache.key()  # and rewritten


def test_a_file_others_can_write_is_ignored(home):
    real = probe.probe_host().landlock_abi
    doctor(cache_file(home))
    os.chmod(cache_file(home), 0o620)
    assert fresh().landlock_abi == real
    doctor(cache_file(home))
    os.chmod(cache_file(home), 0o602)
    assert fresh().landlock_abi == real


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another uid")
def test_a_file_owned_by_another_uid_is_ignored(home):
    real = probe.probe_host().landlock_abi
    doctor(cache_file(home))
    os.chown(cache_file(home), 12345, 12345)
    assert fresh().landlock_abi == real


def test_a_symlink_is_not_followed(home, tmp_path_factory):
    real = probe.probe_host().landlock_abi
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "probe.json"
    elsewhere.write_text(cache_file(home).read_text())
    doctor(elsewhere)
    cache_file(home).unlink()
    cache_file(home).symlink_to(elsewhere)
    assert fresh().landlock_abi == real
    assert not cache_file(home).is_symlink()  # replaced by a file of its own, the target untouched
    assert json.loads(elsewhere.read_text())["probe"]["landlock_abi"] == DOCTORED


def test_a_directory_others_can_write_is_neither_read_nor_written(home):
    real = probe.probe_host().landlock_abi
    doctor(cache_file(home))
    os.chmod(cache_dir(home), 0o777)
    assert fresh().landlock_abi == real
    assert json.loads(cache_file(home).read_text())["probe"]["landlock_abi"] == DOCTORED  # not rewritten there


def test_refresh_measures_again_and_the_env_switch_skips_the_cache(home, monkeypatch):
    real = probe.probe_host().landlock_abi
    doctor(cache_file(home))
    probe._cache = None
    assert probe.probe_host(refresh=True).landlock_abi == real
    assert json.loads(cache_file(home).read_text())["probe"]["landlock_abi"] == real
    doctor(cache_file(home))
    monkeypatch.setenv(probecache.ENV, "off")
    assert fresh().landlock_abi == real
    assert json.loads(cache_file(home).read_text())["probe"]["landlock_abi"] == DOCTORED  # nor written


def test_mur_probe_refresh_rewrites_the_cache(home):
    probe.probe_host()
    doctor(cache_file(home))
    env = {**os.environ, "HOME": str(home)}
    cached = subprocess.run([sys.executable, "-m", "mur", "probe", "--json"], capture_output=True, text=True,
                            env=env, timeout=60, check=True)
    assert json.loads(cached.stdout)["landlock_abi"] == DOCTORED
    again = subprocess.run([sys.executable, "-m", "mur", "probe", "--json", "--refresh"], capture_output=True,
                           text=True, env=env, timeout=60, check=True)
    assert json.loads(again.stdout)["landlock_abi"] != DOCTORED
    assert json.loads(cache_file(home).read_text())["probe"]["landlock_abi"] != DOCTORED


def test_two_builds_used_in_turn_keep_an_answer_each(home):
    """A venv's CLI and a deployed service's bundle under one user: each reads its own answer back
    (one file per build; a single file made each measure again whenever the other had run)."""
    probe.probe_host()
    ours = probecache.key()
    other = {**ours, "python": "/opt/mur-bundle/mur", "mur": "0.0.1"}
    assert probecache.file_name(other) != probecache.file_name(ours)
    assert probecache.store(other, {"landlock_abi": DOCTORED})
    assert probecache.load(other) == {"landlock_abi": DOCTORED}
    assert probecache.load(ours) is not None and fresh().landlock_abi != DOCTORED
