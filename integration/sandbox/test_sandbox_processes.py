"""Other sessions and processes (issue 12, class 4): a tool affects only its own session's processes.

As root each session's tools run as a uid leased for that session; as another user they share
mur's uid and get a pid namespace of their own instead. Either way every call that names another
process by pid -- kill, pidfd_send_signal, setpriority, prlimit, sched_setaffinity,
sched_setscheduler, ioprio_set, process_madvise, ptrace -- is refused for a victim outside the
session, beside a control: the same calls, made bare by a process of the victim's uid, succeed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from escape_scripts import ATTACK, CHANGES, VICTIM  # type: ignore[import-not-found]
from sbx_support import HOST_ENV, SYSTEM_PYTHON  # type: ignore[import-not-found]

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]


def nice_affinity_nofile(pid: int) -> tuple[int, list[int], str]:
    nice = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[16])
    nofile = next(line for line in open(f"/proc/{pid}/limits") if line.startswith("Max open files"))
    return nice, sorted(os.sched_getaffinity(pid)), nofile


def attack(sb, pid: int) -> dict[str, str]:
    r = sb.run("python3", args=["-c", ATTACK, str(pid)])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


def bare_attack(pid: int, uid: int) -> dict[str, str]:
    r = subprocess.run([SYSTEM_PYTHON, "-c", ATTACK, str(pid), "control"], capture_output=True, text=True, timeout=60,
                       env=HOST_ENV, user=uid, group=uid, extra_groups=[])
    return json.loads(r.stdout)


def refused(got: dict[str, str]) -> None:
    for name, value in got.items():
        assert value in ("EPERM", "EACCES", "ESRCH"), (name, value)


def test_another_sessions_tool_is_out_of_reach(sandbox, record_escape):
    a, b = sandbox(), sandbox(own_workdir=True)
    assert a.policy.run_as != b.policy.run_as  # a uid of its own each
    victim = threading.Thread(target=b.run, args=("python3",), kwargs={"args": ["-c", VICTIM], "timeout": 60},
                              daemon=True)
    victim.start()
    pid_file = b.live_workdir / "victim.pid"
    until = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < until:
        time.sleep(0.05)
    pid = max(b.tool_pids())  # its host pid (the file holds its pid inside b's namespace)
    before = nice_affinity_nofile(pid)
    got = attack(a, pid)
    refused(got)
    assert nice_affinity_nofile(pid) == before and os.path.exists(f"/proc/{pid}")
    # kill(-1) as the session uid reaches the session's own processes only
    a.run("bash", command="kill -9 -1")
    assert os.path.exists(f"/proc/{pid}")
    control = bare_attack(pid, b.policy.run_as[0])  # a process of the victim's uid
    for name in CHANGES:
        assert control[name] == "ok", (name, control)
    victim.join(timeout=20)
    assert not victim.is_alive()  # the control's SIGTERM ended it
    record_escape("renice/prlimit/affinity/ioprio/kill another session", "EPERM (own uid per session)",
                  "the victim's uid changes it all")


def test_a_daemon_running_as_nobody_is_out_of_reach(sandbox, record_escape):
    sb = sandbox()
    daemon = subprocess.Popen(["sleep", "60"], user=65534, group=65534, extra_groups=[], env=HOST_ENV)
    try:
        before = nice_affinity_nofile(daemon.pid)
        refused(attack(sb, daemon.pid))
        assert nice_affinity_nofile(daemon.pid) == before and daemon.poll() is None
        mur = attack(sb, os.getpid())  # and mur itself
        refused(mur)
        control = bare_attack(daemon.pid, 65534)
        for name in CHANGES:
            assert control[name] == "ok", (name, control)
        assert daemon.wait(timeout=10) == -15
    finally:
        daemon.kill()
        daemon.wait()
    record_escape("renice/prlimit/kill a daemon running as nobody", "EPERM", "uid 65534 changes it all")


def test_the_sessions_spawner_is_out_of_its_own_tools_reach(sandbox, record_escape):
    """The spawner (zygote.py) shares the tools' uid but stays outside their pid namespace."""
    sb = sandbox()
    assert "pid" in sb.policy.namespaces
    assert sb.run("bash", command="true").exit_code == 0
    spawner = sb._spawner.pid
    before = nice_affinity_nofile(spawner)
    refused(attack(sb, spawner))
    sb.run("bash", command="kill -9 -1")
    assert nice_affinity_nofile(spawner) == before and sb._spawner.pid == spawner and sb._spawner.starts == 1
    control = bare_attack(spawner, sb.policy.run_as[0])  # a process of the spawner's uid, outside the namespace
    for name in CHANGES:
        assert control[name] == "ok", (name, control)
    r = sb.run("bash", command="echo again")  # the control's SIGTERM ended it: a new one serves the call
    assert r.stdout == "again\n" and sb._spawner.starts == 2
    record_escape("renice/prlimit/kill the session's own spawner", "ESRCH (outside the tools' pid namespace)",
                  "its uid changes it all")


def test_a_tool_still_manages_its_own_processes(sandbox):
    sb = sandbox()
    own = ("import os, resource, signal, time\npid = os.fork()\nif pid == 0:\n    time.sleep(30); os._exit(0)\n"
           "os.setpriority(os.PRIO_PROCESS, pid, 5)\nresource.prlimit(pid, resource.RLIMIT_NOFILE, (64, 64))\n"
           "os.sched_setaffinity(pid, {0})\nos.kill(pid, signal.SIGTERM)\n"
           "print(os.waitpid(pid, 0)[1] & 0x7f, os.getpriority(os.PRIO_PROCESS, 0))")
    r = sb.run("python3", args=["-c", own])
    assert r.exit_code == 0 and r.stdout == "15 0\n", r.stderr
    jobs = sb.run("bash", command="(read -t 5 < /dev/zero; :) & p=$!; kill $p; wait $p; echo $?")
    assert jobs.stdout == "143\n"


# --- as another user: tools share mur's uid, the pid namespace keeps them apart ----------------


NONROOT_CAPS = {"shell": {"allow": ["bash", "python3"], "interpreter_runtime": [
    {"binary": "python3", "dirs": [{"path": None, "list_dir": True}]}]}}


def nonroot_caps() -> dict:
    from sbx_support import python_stdlib  # type: ignore[import-not-found]

    caps = json.loads(json.dumps(NONROOT_CAPS))
    caps["shell"]["interpreter_runtime"][0]["dirs"][0]["path"] = python_stdlib()
    return caps


def test_as_another_user_sessions_and_mur_are_out_of_reach(unprivileged_user, record_escape):
    from asuser import bare_as, run_sessions  # type: ignore[import-not-found]

    caps = nonroot_caps()
    out = run_sessions(unprivileged_user, {
        "sessions": [{"caps": caps}, {"caps": caps}],
        "background": [[1, {"binary": "python3", "args": ["-c", VICTIM]}]],
        "calls": [
            [0, {"binary": "python3", "args": ["-c", ATTACK, "{victim1}"]}],
            [0, {"binary": "python3", "args": ["-c", ATTACK, "{driver}"]}],
            [0, {"binary": "bash", "command": "kill -9 -1; echo survived"}],
            [0, {"binary": "bash", "command": "echo $$ $PPID"}],
        ],
    })
    s0, s1 = out["sessions"]
    assert s0["processes"] == "pid-namespace" and "pid" in s0["namespaces"] and "user" in s0["namespaces"]
    for result in s0["results"][:2]:
        refused(json.loads(result["stdout"]))
    assert s1["processes_after"] and all(p["nice"] == 0 for p in s1["processes_after"])
    pids = s0["results"][3]["stdout"].split()
    assert int(pids[0]) < 10 and pids[1] == "0"  # its own numbering; its parent is not even visible
    # control: a plain process of the same uid renices / limits / signals a victim of that uid
    victim = subprocess.Popen(["setpriv", f"--reuid={unprivileged_user.uid}", f"--regid={unprivileged_user.gid}",
                               "--clear-groups", "sleep", "60"])
    try:
        time.sleep(0.3)
        control = bare_as(unprivileged_user, [SYSTEM_PYTHON, "-c", ATTACK, str(victim.pid), "control"])
        got = json.loads(control.stdout)
        for name in ("kill0", "setpriority", "prlimit", "affinity", "scheduler", "pidfd_signal"):
            assert got[name] == "ok", (name, got)
    finally:
        victim.kill()
        victim.wait()
    record_escape("another session / mur, same uid (non-root)", "ESRCH (pid namespace)", "same uid changes it all")


SYSV = ("import ctypes, errno, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "shm = libc.shmget(int(sys.argv[1]), 0, 0)\nprint('found' if shm >= 0 else errno.errorcode[ctypes.get_errno()])")


def test_the_hosts_system_v_ipc_is_out_of_reach(sandbox, record_escape):
    """A world-accessible SysV segment (what a careless daemon leaves): another IPC namespace."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x6D750000 + os.getpid() % 0xFFFF
    shm = libc.shmget(key, 4096, 0o1666)  # IPC_CREAT | 0666
    assert shm >= 0
    try:
        sb = sandbox()
        assert "ipc" in sb.policy.namespaces
        r = sb.run("python3", args=["-c", SYSV, str(key)])
        assert r.stdout == "ENOENT\n", r.stdout + r.stderr
        control = subprocess.run([SYSTEM_PYTHON, "-c", SYSV, str(key)], capture_output=True, text=True, timeout=30,
                                 user=65534, group=65534, extra_groups=[])
        assert control.stdout == "found\n"
    finally:
        libc.shmctl(shm, 0, None)  # IPC_RMID
    record_escape("a host SysV shared memory segment (0666)", "ENOENT (own IPC namespace)", "uid 65534 finds it")


def test_a_killed_mur_leaves_no_namespace_holder_behind():
    """kill -9 of mur: the holder and the pid namespace's init die with it (PR_SET_PDEATHSIG), and
    neither kept mur's stdout open (a caller reading it would wait forever)."""
    code = ("import os, sys\nfrom mur.sandbox import namespaces\nns = namespaces.create(('net', 'ipc', 'pid'))\n"
            "print(ns.holder_pid, ns.init_pidfd is not None, flush=True)\nimport time; time.sleep(60)")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    mur = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=repo)
    holder, has_init = mur.stdout.readline().split()
    assert has_init == "True"
    children = open(f"/proc/{holder}/task/{holder}/children").read().split()
    assert len(children) == 1  # the init
    mur.kill()
    mur.wait()
    assert mur.stdout.read() == ""  # EOF: nothing else holds the pipe
    until = time.monotonic() + 5
    while any(os.path.exists(f"/proc/{p}") for p in (holder, children[0])) and time.monotonic() < until:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{holder}") and not os.path.exists(f"/proc/{children[0]}")
