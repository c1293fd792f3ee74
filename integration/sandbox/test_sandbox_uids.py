"""The per-session uid lease (issue 12, class 4, as root): distinct, locked, released, and
reclaimed after a mur that held it was killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mur.sandbox import uids

pytestmark = [pytest.mark.requires_root]

ROOT = Path(__file__).resolve().parents[2]


def test_leases_are_distinct_locked_and_released(tmp_path):
    state = tmp_path / "uids"
    a, b = uids.lease("ses_same", str(state)), uids.lease("ses_same", str(state))
    lo, hi = uids.RANGES[0]
    assert a.uid != b.uid and lo <= a.uid <= hi and lo <= b.uid <= hi and a.gid == a.uid
    assert sorted(os.listdir(state)) == sorted([str(a.uid), str(b.uid)])
    assert (state / str(a.uid)).read_text().split()[0] == str(os.getpid())
    a.release()
    a.release()  # idempotent
    assert os.listdir(state) == [str(b.uid)]
    b.release()
    assert os.listdir(state) == []


def test_a_lock_directory_others_could_write_is_refused(tmp_path):
    state = tmp_path / "uids"
    state.mkdir(mode=0o777)
    os.chmod(state, 0o777)
    with pytest.raises(uids.UidUnavailable, match="owned by root"):
        uids.lease("ses_x", str(state))


def test_the_range_follows_the_user_namespace_map():
    assert uids.usable_range("0 0 4294967295\n", "0 0 4294967295\n") == uids.RANGES[0]
    rootless = "0 100000 65536\n"  # a rootless container's map
    assert uids.usable_range(rootless, rootless) == uids.RANGES[1]
    assert uids.usable_range("0 1000 1\n", "0 1000 1\n") is None


HOLDER = r'''
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from mur.manifest.capsule import Capabilities
from mur.sandbox.shell import ShellSandbox
caps = Capabilities.model_validate({"shell": {"allow": ["bash", "sleep"]}}, strict=False)
sb = ShellSandbox(caps, sys.argv[2], "ses_killed_%d" % os.getpid(), [], host_env={"PATH": "/usr/bin:/bin"})
sb.start()
import threading
threading.Thread(target=sb.run, args=("bash",), kwargs={"command": "sleep 300 & echo $! > leftover.pid; wait", "timeout": 300}, daemon=True).start()
while not os.path.exists(os.path.join(str(sb.live_workdir), "leftover.pid")):
    time.sleep(0.05)
time.sleep(0.2)
print(json.dumps({"uid": sb.policy.run_as[0], "cgroups": list(sb.cgroup.dirs.values()), "tools": sorted(sb.tool_pids())}), flush=True)
time.sleep(300)
'''


def test_a_killed_murs_uid_is_reclaimed_with_whatever_still_runs_as_it(tmp_path, record_escape):
    """kill -9 of mur: its tools' pid namespace dies with it; whatever still runs as the session uid
    (outside any namespace, as on a host without one) is ended by the next lease."""
    workdir = tmp_path / "w"
    workdir.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(ROOT), str(workdir)], stdout=subprocess.PIPE, text=True)
    info = json.loads(proc.stdout.readline())
    in_namespace = info["tools"]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    until = time.monotonic() + 5
    while any(os.path.exists(f"/proc/{p}") for p in in_namespace) and time.monotonic() < until:
        time.sleep(0.05)
    assert not any(os.path.exists(f"/proc/{p}") for p in in_namespace)  # gone with the namespace's init
    stray = subprocess.Popen(["setpriv", f"--reuid={info['uid']}", f"--regid={info['uid']}", "--clear-groups",
                              "sleep", "300"])
    leftover = stray.pid
    until = time.monotonic() + 15  # setpriv switches uids, then execs sleep: slow under an emulated VM
    while time.monotonic() < until and os.stat(f"/proc/{leftover}").st_uid != info["uid"]:
        time.sleep(0.05)
    try:
        st = os.stat(f"/proc/{leftover}")
        assert st.st_uid == info["uid"]  # still there, as the stale session's uid
        fresh = uids.lease("ses_after_the_kill")  # sweeps the stale lock file
        try:
            until = time.monotonic() + 5
            while os.path.exists(f"/proc/{leftover}") and time.monotonic() < until:
                state = open(f"/proc/{leftover}/stat").read().rsplit(")", 1)[1].split()[0]
                if state == "Z":
                    break
                time.sleep(0.05)
            assert not os.path.exists(f"/proc/{leftover}") or "Z" in open(f"/proc/{leftover}/stat").read()
            assert not os.path.exists(f"{uids.STATE_DIR}/{info['uid']}")
        finally:
            fresh.release()
    finally:
        stray.kill()
        stray.wait()
        for d in info["cgroups"]:
            for _ in range(50):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.05)
    record_escape("kill -9 mur, a process of its uid keeps running", "tools die with the pid namespace; the rest at the next lease",
                  "kept running until then")
