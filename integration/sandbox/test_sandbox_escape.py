"""The escape suite: each attempt must fail inside the sandbox, next to a control showing the same
action succeeds without it. Real kernel: Landlock, seccomp, rlimits, cgroups; nothing mocked.

Bombs are never run unbounded outside the sandbox: their controls are bounded versions that show
the host would have allowed more than the sandbox did.
"""

from __future__ import annotations

import os
import shutil
import socketserver
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from sbx_support import HOST_ENV, SYSTEM_PYTHON, capabilities  # type: ignore[import-not-found]
from mur.errors import MurError
from mur.sandbox.shell import limit_error

pytestmark = [pytest.mark.requires_landlock, pytest.mark.requires_root]


def bare(argv, **kw) -> subprocess.CompletedProcess:
    """The control: the same action as a plain subprocess, no sandbox."""
    kw.setdefault("env", HOST_ENV)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


# --- filesystem ------------------------------------------------------------------------------


def refusal(sb) -> str:
    """What a path outside the grants answers: it does not exist in a composed root; Landlock refuses it on the host's tree."""
    return "No such file or directory" if sb.policy.view is not None else "Permission denied"


def test_read_etc_shadow(sandbox, record_escape):
    sb = sandbox()
    r = sb.run("cat", command="cat /etc/shadow")
    assert r.exit_code != 0 and refusal(sb) in r.stderr and r.stdout == ""
    control = bare(["cat", "/etc/shadow"])
    assert control.returncode == 0 and "root:" in control.stdout
    record_escape("read /etc/shadow", f"rc {r.exit_code}: {r.stderr.strip()}", "root reads it")


def test_read_a_file_outside_the_grant(sandbox, outside, record_escape):
    sb = sandbox()
    secret = outside / "secret.txt"
    r = sb.run("cat", command=f"cat {secret}")
    assert r.exit_code != 0 and refusal(sb) in r.stderr and "outside-secret" not in r.stdout
    # the sandbox uid could read it under plain permissions: Landlock is what refuses
    control = bare(["cat", str(secret)], user=65534, group=65534, extra_groups=[])
    assert control.returncode == 0 and control.stdout == "outside-secret\n"
    r2 = sb.run("bash", command=f"echo \"$(< {secret})\"")
    assert "outside-secret" not in r2.stdout
    record_escape("read a file outside the grant", f"rc {r.exit_code}: {refusal(sb)}", "uid 65534 reads it")


def test_write_outside_the_workdir(sandbox, outside, record_escape):
    sb = sandbox()
    target = outside / "planted.txt"
    r = sb.run("bash", command=f"echo pwned > {target}")
    # the layers refuse it: it does not exist in a composed root, else the read-only mount view
    # (EROFS) before Landlock (EACCES) gets to
    assert r.exit_code != 0 and not target.exists()
    assert any(m in r.stderr for m in ("No such file or directory", "Read-only file system", "Permission denied"))
    planted = Path(f"/tmp/mur-planted-{os.urandom(6).hex()}")
    r2 = sb.run("bash", command=f"echo pwned > {planted}")
    assert not planted.exists()  # the host's /tmp: refused, or (composed root) the session's private /tmp got it
    assert r2.exit_code != 0 if sb.policy.view is None else r2.exit_code == 0
    ok = sb.run("bash", command="echo fine > inside.txt && cat inside.txt")
    assert ok.exit_code == 0 and ok.stdout == "fine\n" and (sb.live_workdir / "inside.txt").read_text() == "fine\n"
    control = bare(["bash", "-c", f"echo pwned > {target}"], user=65534, group=65534, extra_groups=[])
    assert control.returncode == 0 and target.read_text() == "pwned\n"
    record_escape("write outside the workdir", f"rc {r.exit_code}: {r.stderr.strip().rsplit(': ', 1)[-1]}",
                  "uid 65534 writes it")


def test_exec_a_binary_that_is_not_allowed(sandbox, record_escape):
    sb = sandbox()
    r = sb.run("bash", command="/usr/bin/id")
    if sb.policy.view is not None:  # not in the tools' root at all
        assert r.exit_code == 127 and "No such file or directory" in r.stderr, r.stderr
    else:
        assert r.exit_code == 126 and "Permission denied" in r.stderr
    with pytest.raises(MurError) as info:
        sb.run("id", command="id")
    assert info.value.code == "E-RUN-015"
    control = bare(["/usr/bin/id"])
    assert control.returncode == 0 and "uid=" in control.stdout
    record_escape("exec a binary not allowed (/usr/bin/id)", f"rc {r.exit_code}: Permission denied", "runs")


def test_exec_a_binary_copied_into_the_workdir(sandbox, record_escape):
    sb = sandbox()
    for where in (sb.live_workdir, sb.workdir):  # the tools' copy, and the control's on the host
        shutil.copy("/usr/bin/cat", where / "mycat")
        os.chmod(where / "mycat", 0o755)
        (where / "note.txt").write_text("note\n")
    copy = sb.workdir / "mycat"
    direct = sb.run("bash", command="./mycat note.txt")
    assert direct.exit_code == 126 and "Permission denied" in direct.stderr
    loader = sb.run("bash", command="/lib64/ld-linux-x86-64.so.2 ./mycat note.txt")  # maps it, does not exec it
    assert loader.exit_code != 0 and loader.stdout == ""
    memfd = sb.run("python3", args=["-c", (
        "import os\nfd = os.memfd_create('x', 0)\nos.write(fd, open('mycat', 'rb').read())\n"
        "os.execve(fd, ['mycat', 'note.txt'], {})")])
    assert memfd.exit_code != 0 and memfd.stdout == "" and "Operation not permitted" in memfd.stderr
    control = bare([str(copy), "note.txt"], cwd=sb.workdir)
    assert control.returncode == 0 and control.stdout == "note\n"
    record_escape("exec a copy in the workdir (direct/ld.so/memfd)",
                  f"rc {direct.exit_code}/{loader.exit_code}/{memfd.exit_code}", "the copy runs")


# --- sockets and network ---------------------------------------------------------------------


@pytest.fixture
def unix_daemon():
    directory = tempfile.mkdtemp(prefix="mur-uds-")
    os.chmod(directory, 0o777)
    path = os.path.join(directory, "daemon.sock")

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            self.wfile.write(b"pong\n")

    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    os.chmod(path, 0o777)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield path
    server.shutdown()
    server.server_close()
    shutil.rmtree(directory, ignore_errors=True)


UNIX_CLIENT = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\n"
               "print(s.recv(10).decode().strip())")


def test_connect_to_a_unix_socket(sandbox, unix_daemon, record_escape):
    sb = sandbox()
    r = sb.run("python3", args=["-c", UNIX_CLIENT, unix_daemon])
    assert r.exit_code != 0 and "Permission denied" in r.stderr and "pong" not in r.stdout
    control = bare([SYSTEM_PYTHON, "-c", UNIX_CLIENT, unix_daemon], user=65534, group=65534, extra_groups=[])
    assert control.returncode == 0 and control.stdout == "pong\n"
    record_escape("connect to a test daemon's unix socket", "socket(AF_UNIX): EACCES", "uid 65534 gets pong")


def test_unix_sockets_true_is_the_documented_opt_in(sandbox, unix_daemon):
    sb = sandbox(capabilities(network={"unix_sockets": True}))
    r = sb.run("python3", args=["-c", UNIX_CLIENT, unix_daemon])
    assert r.exit_code == 0 and r.stdout == "pong\n"
    assert "AF_UNIX sockets are ALLOWED" in dict(sb.warnings)["W-SEC-005"]


def test_open_netlink_and_packet_sockets(sandbox, record_escape):
    sb = sandbox(capabilities(network={"unix_sockets": True}))  # no key re-enables these
    code = ("import socket\nfor fam, proto in ((socket.AF_NETLINK, 0), (socket.AF_PACKET, 0)):\n"
            "    try:\n        socket.socket(fam, socket.SOCK_RAW, proto); print('opened', fam)\n"
            "    except OSError as e:\n        print('refused', fam, e.errno)")
    r = sb.run("python3", args=["-c", code])
    assert r.stdout.split("\n")[:2] == ["refused 16 13", "refused 17 13"]
    control = bare([SYSTEM_PYTHON, "-c", code])
    assert "opened 16" in control.stdout
    record_escape("open netlink / packet sockets", "EACCES, EACCES", "root opens netlink")


# TCP ports, hosts and the egress proxy: test_sandbox_network.py; other families: test_sandbox_sockets.py.


# --- resources -------------------------------------------------------------------------------


def test_fork_bomb(sandbox, record_escape):
    sb = sandbox(capabilities(resources={"cgroup_pids_max": 48}))
    began = time.monotonic()
    # A builtin-only 2 s loop keeps the call alive while the bomb multiplies (a bare `wait` could return
    # before any fork failed, which made this test timing-dependent; only bash may exec, so no `sleep`).
    # The call's whole process group dies at its end.
    r = sb.run("bash", command="bomb() { bomb | bomb & }; bomb; SECONDS=0; while (( SECONDS < 2 )); do :; done",
               timeout=8)
    assert r.resource_limit == "cgroup_pids_max" and "fork: retry: Resource temporarily unavailable" in r.stderr
    assert time.monotonic() - began < 20
    until = time.monotonic() + 5  # SIGKILLed at the end of the call; give 48 exits a moment
    while sb.tool_pids() and time.monotonic() < until:
        time.sleep(0.05)
    assert sb.tool_pids() == set()  # the call's whole process group is gone
    # control (bounded): the host lets a plain process run more children than pids.max at once
    code = ("import os, time\npids = []\nfor _ in range(80):\n    pid = os.fork()\n"
            "    if pid == 0:\n        time.sleep(0.5); os._exit(0)\n    pids.append(pid)\n"
            "for p in pids: os.waitpid(p, 0)\nprint(len(pids))")
    control = bare([SYSTEM_PYTHON, "-c", code])
    assert control.returncode == 0 and control.stdout == "80\n"
    record_escape("fork bomb", "stopped at pids.max=48 (cgroup_pids_max)", "80 concurrent children")


def test_memory_bomb(sandbox, record_escape):
    sb = sandbox(capabilities(resources={"cgroup_memory_bytes": 64 << 20}))
    bomb = "b = b'x' * (256 << 20); print(len(b))"
    r = sb.run("python3", args=["-c", bomb])
    assert r.exit_code == 137 and r.resource_limit == "cgroup_memory_bytes" and r.stdout == ""
    err = limit_error(r)
    assert err.code == "E-RUN-011" and "capabilities.resources.cgroup_memory_bytes" in err.message
    control = bare([SYSTEM_PYTHON, "-c", bomb])  # bounded: 256 MiB
    assert control.returncode == 0 and control.stdout == f"{256 << 20}\n"
    record_escape("memory bomb (256 MiB vs 64 MiB)", "OOM-killed (cgroup_memory_bytes)", "allocates 256 MiB")


def test_address_space_limit_is_left_unattributed(sandbox):
    sb = sandbox(capabilities(resources={"memory_bytes": 256 << 20}))
    r = sb.run("python3", args=["-c", "b = bytearray(512 << 20)"])
    assert r.exit_code == 1 and "MemoryError" in r.stderr and r.resource_limit is None  # spec: ENOMEM, not guessed


def test_fill_the_disk_past_workdir_max_bytes(sandbox, record_escape):
    sb = sandbox(capabilities(resources={"workdir_max_bytes": 4 << 20}))
    writer = ("import time\nfor i in range(200):\n    open(f'fill{i}', 'wb').write(b'x' * (1 << 20))\n"
              "    time.sleep(0.05)\nprint('wrote everything')")
    r = sb.run("python3", args=["-c", writer])
    assert r.exit_code != 0 and "wrote everything" not in r.stdout  # refused (ENOSPC) or killed within a poll
    exceeded = sb.workdir_exceeded()
    assert exceeded is not None and exceeded.code == "E-RUN-013"
    written = len(list(sb.live_workdir.glob("fill*")))
    if sb.policy.disk.kernel:  # the kernel refused the write at the ceiling: never past it
        assert written <= 4 and sb.disk.usage().used <= 4 << 20
        # the write refused, or (on a slow CPU: an emulated VM) the guard's tick saw the disk full first
        assert "No space left on device" in r.stderr or "reached capabilities.resources.workdir_max_bytes" in r.stderr, \
            r.stderr
    else:
        assert 4 < written < 100
    with pytest.raises(MurError) as info:
        sb.run("bash", command="echo more")
    assert info.value.code == "E-RUN-013"
    with tempfile.TemporaryDirectory() as tmp:
        control = bare([SYSTEM_PYTHON, "-c", writer.replace("range(200)", "range(8)")], cwd=tmp)
        assert control.returncode == 0 and len(list(Path(tmp).glob("fill*"))) == 8
    record_escape("fill the disk past workdir_max_bytes (4 MiB)", f"killed after {written} MiB, E-RUN-013",
                  "writes 8 MiB")


def test_a_call_the_ceiling_ends_says_why(sandbox):
    """The guard saw the session disk full (less free than a refused write could leave) while the
    writer slept: the call ends with the ceiling's reason, not as a lost spawner."""
    sb = sandbox(capabilities(resources={"workdir_max_bytes": 4 << 20}))
    if not sb.policy.disk.kernel:
        pytest.skip("no session disk here: the watcher's path is test_fill_the_disk_past_workdir_max_bytes")
    writer = "for i in range(3):\n    open(f'fill{i}', 'wb').write(b'x' * (1 << 20))\nimport time; time.sleep(30)"
    r = sb.run("python3", args=["-c", writer], timeout=60)
    assert r.exit_code != 0 and r.duration_ms < 20_000, r
    assert "reached capabilities.resources.workdir_max_bytes while 'python3' ran" in r.stderr, r.stderr
    assert sb.workdir_exceeded().code == "E-RUN-013"


def test_write_past_max_file_size_bytes(sandbox, record_escape):
    sb = sandbox(capabilities(resources={"max_file_size_bytes": 1 << 20}))
    write = "x=$(printf '%*s' 65536 ''); for i in $(printf '%s ' {1..64}); do printf '%s' \"$x\"; done > big"
    r = sb.run("bash", command=write)
    assert r.resource_limit == "max_file_size_bytes" and r.exit_code == 128 + 25
    assert (sb.live_workdir / "big").stat().st_size == 1 << 20
    with tempfile.TemporaryDirectory() as tmp:
        control = bare(["bash", "-c", write], cwd=tmp)
        assert control.returncode == 0 and (Path(tmp) / "big").stat().st_size == 4 << 20
    record_escape("write past max_file_size_bytes (1 MiB)", "SIGXFSZ at exactly 1 MiB", "writes 4 MiB")


def test_spin_past_cpu_seconds(sandbox, record_escape):
    sb = sandbox(capabilities(resources={"cpu_seconds": 1}))
    r = sb.run("bash", command="while :; do :; done", timeout=120)  # wall time stretches on a loaded host
    assert r.resource_limit == "cpu_seconds" and r.exit_code == 137 and not r.timed_out
    assert r.duration_ms >= 900
    assert limit_error(r).message == "shell subprocess 'bash' was killed for exceeding capabilities.resources.cpu_seconds"
    control = bare([SYSTEM_PYTHON, "-c", "import time\nwhile time.process_time() < 1.5: pass\nprint('done')"])
    assert control.returncode == 0 and control.stdout == "done\n"
    record_escape("spin past cpu_seconds (1 s)", "killed at 1 s CPU (cpu_seconds)", "spins 1.5 s")


# --- environment and signals -----------------------------------------------------------------


def test_read_a_stripped_credential(sandbox, record_escape):
    env = dict(HOST_ENV, GITHUB_TOKEN="ghp_mur_test", AWS_SECRET_ACCESS_KEY="aws-secret", OPENAI_API_KEY="sk-x",
               CUSTOM_SECRET_THING="custom", KEEP_ME="kept")
    sb = sandbox(capabilities(shell={"strip_env": ["CUSTOM_*"], "baseline_env": ["KEEP_*", "CUSTOM_*", "AWS_*"]}),
                 host_env=env)
    show = 'echo "${GITHUB_TOKEN-unset}|${AWS_SECRET_ACCESS_KEY-unset}|${OPENAI_API_KEY-unset}|${CUSTOM_SECRET_THING-unset}|${KEEP_ME-unset}|$HOME"'
    r = sb.run("bash", command=show)
    assert r.stdout == f"unset|unset|unset|unset|kept|{sb.workdir}/.capsule-home\n"
    leak = sb.run("bash", command="cat /proc/1/environ /proc/$PPID/environ 2>&1; echo done")
    assert "ghp_mur_test" not in leak.stdout
    control = bare(["bash", "-c", show], env=env)
    assert control.stdout.startswith("ghp_mur_test|aws-secret|sk-x|custom|kept|")
    record_escape("read stripped credentials from the env", "unset|unset|unset|unset", "ghp_…|aws-…|sk-…|custom")


def test_signal_a_process_outside(sandbox, record_escape):
    sb = sandbox()
    # a victim the sandbox uid could signal under plain permissions: same uid
    victim = subprocess.Popen(["sleep", "60"], user=65534, group=65534, extra_groups=[], env=HOST_ENV)
    try:
        r = sb.run("bash", command=f"kill -TERM {victim.pid}")
        # the session's pid namespace hides it (ESRCH); without one, the session uid is refused (EPERM)
        assert r.exit_code != 0 and ("Operation not permitted" in r.stderr or "No such process" in r.stderr)
        assert victim.poll() is None
        parent = sb.run("bash", command=f"kill -0 {os.getpid()}")
        assert parent.exit_code != 0
        control = bare(["kill", "-TERM", str(victim.pid)], user=65534, group=65534, extra_groups=[])
        assert control.returncode == 0 and victim.wait(timeout=5) == -15
    finally:
        victim.kill()
        victim.wait()
    record_escape("signal a process outside (same uid)", f"rc {r.exit_code}: {r.stderr.split(' - ')[-1].strip()}",
                  "uid 65534 kills it")


def test_namespaces_ptrace_and_mount_are_refused(sandbox, record_escape):
    sb = sandbox()
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "for name, call in (('unshare', lambda: libc.unshare(0x10000000)),"
            " ('mount', lambda: libc.mount(b'none', b'.', b'tmpfs', 0, None)),"
            " ('ptrace', lambda: libc.ptrace(16, os.getppid(), None, None))):\n"
            "    rc = call(); print(name, rc, ctypes.get_errno())")
    r = sb.run("python3", args=["-c", code])
    assert r.stdout.split("\n")[:3] == ["unshare -1 1", "mount -1 1", "ptrace -1 1"]
    control = bare([SYSTEM_PYTHON, "-c", code.replace("('mount',", "('mount_skipped',").replace(
        "libc.mount(b'none', b'.', b'tmpfs', 0, None)", "0")])
    assert control.stdout.split("\n")[0] == "unshare 0 0"  # root may create a user namespace bare
    record_escape("unshare(CLONE_NEWUSER) / mount / ptrace", "EPERM x3", "root unshares")


def test_as_another_user_a_copied_binary_cannot_run_through_the_loader(unprivileged_user, record_escape):
    """Without root the noexec workdir comes from the user namespace's mount namespace."""
    from asuser import run_sessions  # type: ignore[import-not-found]

    out = run_sessions(unprivileged_user, {"sessions": [{"caps": {"shell": {"allow": ["bash", "cat"]}}}], "calls": [
        [0, {"binary": "cat", "command": "cat /usr/bin/cat"}],
        [0, {"binary": "bash", "command": "echo note > note.txt; /lib64/ld-linux-x86-64.so.2 /usr/bin/cat note.txt"}],
    ]})
    session = out["sessions"][0]
    assert "mnt" in session["namespaces"]
    # the loader maps the real cat fine (control), then is refused a copy in the (noexec) workdir
    copy = run_sessions(unprivileged_user, {"sessions": [{"caps": {"shell": {"allow": ["bash", "cp", "cat"]}}}],
                                            "calls": [[0, {"binary": "bash", "command": (
                                                "cp /usr/bin/cat ./mycat 2>&1 || exit 9; echo note > note.txt; "
                                                "/lib64/ld-linux-x86-64.so.2 ./mycat note.txt; echo rc=$?")}]]})
    loader = copy["sessions"][0]["results"][0]
    assert "rc=" in loader["stdout"] and "rc=0" not in loader["stdout"] and "note" not in loader["stdout"], loader
    assert session["results"][1]["stdout"] == "note\n"
    record_escape("ld.so ./copied-binary as non-root", "refused (noexec mount, user namespace)", "ld.so runs cat")
