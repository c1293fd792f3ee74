"""The deployment lock, run for real on this machine (the holder is the same POSIX sh script a
target runs): one holder at a time, the holder named, --lock-wait, released with its process
(never by age), a lock file removed under a waiter, and the shared lock against collection."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from mur.deploy.deadlines import Deadlines
from mur.deploy.lock import Holder, TargetLock, holder_script
from mur.deploy.targets.local import LocalTarget
from mur.errors import MurError

FAST = Deadlines(keepalive=0.3, dead_after=1.0)


@pytest.fixture
def target(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    return LocalTarget()


def lock(t, name="dep_x", **kw) -> TargetLock:
    kw.setdefault("command", "mur deploy dep_x")
    return TargetLock(t, name, deadlines=FAST, **kw)


def test_a_second_command_fails_at_once_naming_the_holder(target):
    first = lock(target).acquire()
    try:
        t0 = time.monotonic()
        with pytest.raises(MurError) as err:
            lock(target, command="mur deploy rollback dep_x").acquire()
        assert time.monotonic() - t0 < 5
        assert err.value.code == "E-DEPLOY-013"
        assert f"by `mur deploy dep_x` (pid {os.getpid()} on " in err.value.message and "--lock-wait" in err.value.hint
    finally:
        first.release()
    lock(target).acquire().release()  # released with the command


def test_lock_wait_waits_then_takes_it(target):
    first = lock(target).acquire()
    waited = {}

    def later():
        time.sleep(1.0)
        first.release()

    import threading

    threading.Thread(target=later).start()
    t0 = time.monotonic()
    second = lock(target, wait=20).acquire()
    waited["s"] = time.monotonic() - t0
    assert 0.8 < waited["s"] < 10 and second.previous is not None and second.previous.token == first.token
    second.release()


def test_a_holder_whose_heartbeats_stop_lets_go_without_any_age_rule(target):
    first = lock(target).acquire()
    first._stop.set()  # this side stops beating (its link went silent): the target's holder gives up
    t0 = time.monotonic()
    second = lock(target, wait=20).acquire()
    assert time.monotonic() - t0 < FAST.lock_release + 3
    second.release()


def test_a_killed_command_releases_its_lock_at_once(target, tmp_path):
    script = holder_script(str(tmp_path / ".murmur" / "locks"), "dep_k", shared=False, wait=0, release_after=600,
                           holder='{"command": "mur deploy", "token": "t"}')
    proc = subprocess.Popen(["/bin/sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            start_new_session=True)
    assert proc.stdout.readline().startswith(b"@@locked")
    with pytest.raises(MurError):
        lock(target, "dep_k").acquire()
    os.kill(proc.pid, signal.SIGKILL)  # what kill -9 (or a reset connection) does to the holder
    proc.wait()
    proc.stdin.close()
    proc.stdout.close()
    lock(target, "dep_k", wait=5).acquire().release()


def test_removing_the_lock_files_under_a_waiter_gives_it_a_fresh_lock(target, tmp_path):
    first = lock(target).acquire()
    import threading

    got = {}

    def wait_for_it():
        got["lock"] = lock(target, wait=20).acquire()

    th = threading.Thread(target=wait_for_it)
    th.start()
    time.sleep(0.5)
    assert first.remove_files()  # destroy: the files go while still held
    first.release()
    th.join(20)
    lk = got["lock"]
    locks = tmp_path / ".murmur" / "locks"
    assert (locks / "dep_x.lock").exists() and (locks / "dep_x.holder").exists()
    # and it really holds the file that is there: nobody else gets it
    with pytest.raises(MurError):
        lock(target).acquire()
    lk.release()


def test_collection_never_runs_while_a_deploy_holds_the_shared_lock(target, tmp_path):
    from mur.deploy.cleanup import gc_shared_command
    from mur.deploy.steps import Layout

    lay = Layout(str(tmp_path), "dep_x")
    (tmp_path / ".murmur" / "bin").mkdir(parents=True)
    (tmp_path / ".murmur" / "bin" / "mur-9-linux-x86_64").write_bytes(b"x")  # no deployment references it
    deploying = lock(target, shared=True).acquire()
    out = target.run(gc_shared_command(lay)).stdout
    assert "@@busy" in out and (tmp_path / ".murmur" / "bin" / "mur-9-linux-x86_64").exists()
    assert deploying.drop_shared()
    out = target.run(gc_shared_command(lay)).stdout
    assert "@@gc runtime mur-9-linux-x86_64" in out and not (tmp_path / ".murmur" / "bin").exists()
    deploying.release()


def test_holder_lines_parse():
    h = Holder.parse('100 {"host": "laptop", "user": "ann", "pid": 7, "command": "mur deploy", "started": "S", "token": "x"}')
    assert h is not None and h.describe(130) == "`mur deploy` (pid 7 on laptop, user ann, started S, for 30s)"
    assert Holder.parse("garbage") is None


def test_the_last_collection_removes_every_cache_the_runtime_writes(target, tmp_path, monkeypatch):
    """A target's last deployment gone, nothing of ~/.murmur stays: the caches a `mur run` there
    writes (the probe's answer, remembered digests, compiled components) are written here by the
    real code under that home, then collected by the real command."""
    from mur import privatecache
    from mur.deploy.cleanup import gc_shared_command
    from mur.deploy.steps import Layout
    from mur.sandbox import probecache
    from mur.wasm import sources

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("MUR_CACHE_DIR", raising=False)
    for name in (probecache.DIR_NAME, sources.DIGESTS_DIR):
        assert privatecache.write(name, "entry", b"{}")
    (tmp_path / ".murmur" / "cache" / "wasm").mkdir()
    lay = Layout(str(tmp_path), "dep_x")
    target.run(gc_shared_command(lay))
    assert not (tmp_path / ".murmur").exists(), sorted(p.name for p in (tmp_path / ".murmur").rglob("*"))


def test_a_stop_that_outlives_its_command_keeps_the_deployment_locked(target, tmp_path):
    """A stop (or restart) whose link died goes on on the target; the command's lock must not be
    free for another command until it has ended (it used to be, for up to the stop's 60 s)."""
    from mur.deploy.init.supervisor import hold_run_dir
    from mur.deploy.steps import Layout

    lay = Layout(str(tmp_path), "dep_o")
    os.makedirs(lay.run_dir)
    first = lock(target, "dep_o").acquire()
    left = subprocess.Popen(["sh", "-c", f"{hold_run_dir(lay)}; sleep 4"])  # what the command sent, still running
    try:
        deadline = time.monotonic() + 5
        while not flocked(lay.run_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert flocked(lay.run_dir)
        first._stop.set()  # the command's link dies: its holder sees the end of its input, nothing more
        first.held.proc.stdin.close()
        time.sleep(0.5)
        with pytest.raises(MurError) as err:
            lock(target, "dep_o", command="mur deploy stop dep_o").acquire()
        assert err.value.code == "E-DEPLOY-013"
        t0 = time.monotonic()
        lock(target, "dep_o", wait=20).acquire().release()  # taken once the stop ended
        assert left.poll() is not None and time.monotonic() - t0 < 10
    finally:
        left.kill()
        left.wait()
        first.release()
    lock(target, "dep_x").acquire().release()  # any other deployment: never waits for it


def flocked(path: str) -> bool:
    """Someone holds an flock on `path` (asked with a non-blocking flock: in a PID namespace, as in
    the clean container, /proc/locks hides a lock whose taker, `flock` in hold_run_dir, has exited)."""
    return subprocess.run(["flock", "-n", path, "true"]).returncode != 0


def test_a_status_sees_a_held_lock_and_its_holder_without_taking_it(target, tmp_path):
    """Both probes (held_here on this machine, probe_command's sh on a target) say held while a
    command holds the lock and free once it let go, also in a container: there /proc/locks hides a
    lock whose taker (the holder's `flock` child) has exited, which only /proc/locks was read for."""
    from mur.deploy.lock import held_here, locks_dir, probe_command

    base = f"{locks_dir(str(tmp_path))}/dep_x"

    def probe() -> str:
        return subprocess.run(["sh", "-c", probe_command(base + ".lock", base + ".holder")],
                              capture_output=True, text=True, check=True).stdout

    held = lock(target).acquire()
    try:
        assert held_here(base + ".lock")
        out = probe()
        assert out.startswith("@@lock held ") and "mur deploy dep_x" in out
    finally:
        held.release()
    assert not held_here(base + ".lock")
    assert probe() == "@@lock free\n"
