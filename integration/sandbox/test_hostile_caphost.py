"""A capsule forked by the capsule host (MUR_CAPSULE_HOST=on) is sandboxed exactly as one run in-process:
the hostile model's shell tools run under the session's uid, cgroup and Landlock, as root and as a
non-root deploy user, and the run did go through the host (the capsule is not the client process)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from mur.testing.caphosts import stop_hosts
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
        stop_hosts(home)


# A tool that finds the host's socket (listed, or by its known name) and asks it for a run of its own,
# with its own stdin/stdout/stderr as a client would: the session's seccomp filter refuses the UNIX
# socket itself (no unix_sockets grant), and were it granted, the host serves only a client of its uid
# and exact security context (a tool has another seccomp filter, and as root another uid:
# integration/session/test_capsule_host.py has the refusals).
REACH_HOST = r"""
import array, glob, json, socket, struct, sys
paths = glob.glob(sys.argv[1] + "/.murmur/run/caphost-*.sock") or [sys.argv[2]]  # listed, or known
try:
    s = socket.socket(socket.AF_UNIX)  # refused by the session's seccomp filter unless unix_sockets: true
    s.connect(paths[0])
    req = json.dumps({"argv": ["run", "--help"], "env": {}, "cwd": "/"}).encode()
    s.sendmsg([struct.pack(">I", len(req)) + req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
    head = s.recv(4)
    print("reply:", s.recv(struct.unpack(">I", head)[0]).decode() if len(head) == 4 else "EOF")
except OSError as exc:
    print("unreachable:", exc)
"""


def test_a_tool_that_reaches_the_host_gets_no_run_of_its_own(hostile, who, tmp_path):
    import shlex

    capsule = hostile(user=who)
    home = who.home if who is not None else tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"MUR_CAPSULE_HOST": "on", "MUR_CAPSULE_HOST_IDLE_SECS": "20", "MUR_CAPSULE_HOST_DEBUG": "1", "HOME": str(home)}
    try:
        from mur.caphost import wire

        known = home / ".murmur" / "run" / f"caphost-{wire.code_key()}.sock"  # the same code: the same key
        running = capsule.start([f"python3 -c {shlex.quote(REACH_HOST)} {shlex.quote(str(home))} {shlex.quote(str(known))}"],
                                env=env)
        client = running.proc.pid
        run = running.finish()
        assert run.returncode == 0 and run.result_text == FINAL_TEXT, run.describe()
        assert run.info["pid"] != client  # the capsule did go through the host
        said = run.results[0].data
        assert said.startswith(("unreachable", "reply:")), said
        assert '"pid"' not in said and (said.startswith("unreachable") or "refused" in said or "EOF" in said), said
    finally:
        stop_hosts(home)
