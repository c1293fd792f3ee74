"""A capsule forked by the capsule host (MUR_CAPSULE_HOST=on) is sandboxed exactly as one run in-process:
the hostile model's shell tools run under the session's uid, cgroup and Landlock, as root and as a
non-root deploy user, and the run did go through the host (the capsule is not the client process)."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from hostile import FINAL_TEXT  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]


@pytest.fixture(params=["root", "non-root"])
def who(request):
    if request.param == "root":
        return None
    return request.getfixturevalue("unprivileged_user")


def test_a_host_forked_capsule_keeps_uid_cgroup_and_landlock(hostile, who, tmp_path):
    capsule = hostile(user=who)
    home = who.home if who is not None else tmp_path / "home"
    home.mkdir(exist_ok=True)
    escape = Path("/tmp") / f"mur-caphost-escape-{uuid.uuid4().hex}"
    env = {"MUR_CAPSULE_HOST": "on", "MUR_CAPSULE_HOST_IDLE_SECS": "20", "MUR_CAPSULE_HOST_DEBUG": "1",
           "HOME": str(home)}
    try:
        running = capsule.start(["id -u", f"touch {escape}; echo rc=$?", "cat /proc/self/cgroup"], env=env)
        client = running.proc.pid
        client_cgroup = Path(f"/proc/{client}/cgroup").read_text()
        run = running.finish()
        assert run.returncode == 0 and run.result_text == FINAL_TEXT, run.describe()
        assert "capsule host" not in run.stderr, run.stderr  # not refused: the host ran it
        assert run.info["pid"] != client  # forked by the host, not run by the client
        uid = int(run.results[0].data.split()[0])
        assert uid != 0 if who is None else uid == who.uid  # root drops to the session uid
        # Landlock refuses the write, or (sealed) it lands in the session's own root: never on the host
        assert not escape.exists(), run.results[1].data
        tool_cgroup = run.results[2].data
        assert tool_cgroup.strip() and tool_cgroup != client_cgroup  # the session's own cgroup, below the client's
    finally:
        escape.unlink(missing_ok=True)
        for lock in (home / ".murmur" / "run").glob("caphost-*.sock.lock"):
            try:
                os.kill(int(lock.read_text().split()[0]), signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                pass
