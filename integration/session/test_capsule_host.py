"""The capsule host (a service's run by default, any non-interactive run with MUR_CAPSULE_HOST=on): `mur run` hands it to a per-user host
that forks the capsule. Same answers and exit codes as a run in-process; the capsule is its own
process, in the client's cgroups, with the client's uid, rlimits and umask; a client the host
cannot serve exactly as itself runs the capsule itself; signals reach the capsule; a client that
dies takes its capsule with it."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mur.testing.caphosts import host_pids, stop_hosts, wait_for_host
from session_support import mur_env

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfd_open (Linux 5.3+)")


@pytest.fixture
def host_env(home: Path):
    env = mur_env(home, MUR_CAPSULE_HOST="on", MUR_CAPSULE_HOST_IDLE_SECS="30", MURMUR_A2A_TIMEOUT_SECS="5",
                  MUR_CAPSULE_HOST_DEBUG="1")
    env.pop("XDG_RUNTIME_DIR", None)
    yield env
    stop_hosts(home)  # the host this test started


def mur(*args: str, cwd: Path, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mur", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def host_pid(home: Path) -> int:
    [pid] = host_pids(home)
    return pid


def catches(pid: int, signum: int) -> bool:
    """The process has a handler for `signum` (SigCgt in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_run_through_the_host_answers_as_one_in_process(hello, home, host_env):
    for attempt in range(2):  # the first starts the host, the second finds it
        proc = mur("run", "--task", "Ada", "--json", cwd=hello, env=host_env)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        first, last = (json.loads(line) for line in out.splitlines())
        assert last["status"] == "ok" and last["result"] == "Hello, Ada!\n"
        assert first["pid"] != proc.pid, err  # the capsule ran in a process of its own ...
    assert host_pid(home) != proc.pid  # ... forked by the host
    plain = {k: v for k, v in host_env.items() if k != "MUR_CAPSULE_HOST"}
    results = []
    for env in (host_env, plain):  # a failing run fails alike, message and code
        failing = mur("run", "--task", "x", "-m", "nowhere", cwd=hello, env=env)
        results.append((failing.communicate(timeout=60)[1], failing.wait()))
    assert results[0] == results[1] and results[0][1] == 1 and results[0][0].startswith("error[")


def children_of(pid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if parent_of(int(proc.name)) == pid:
                    found.append(int(proc.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def test_the_next_capsule_is_forked_ahead_and_a_request_only_hands_it_what_to_run(hello, home, host_env):
    """The host keeps one capsule forked while no client waits (a fork of the host costs ~4 ms of a
    warm run); the next run is that process, and its uid, cgroup and output are the client's as
    with a fork on request. The host's end takes it along."""
    env = {**host_env, "MUR_CAPSULE_HOST_DEBUG": "2"}
    mur("run", "--task", "warm", cwd=hello, env=env).communicate(timeout=120)
    host = host_pid(home)
    deadline, seen, since = time.monotonic() + 10, [], time.monotonic()
    while time.monotonic() < deadline:  # the spare that stays: one forked before the host took up
        now = children_of(host)         # the components the warm-up used is replaced by one that has them
        if now != seen:
            seen, since = now, time.monotonic()
        elif len(now) == 1 and time.monotonic() - since > 0.5:
            break
        time.sleep(0.05)
    [spare] = children_of(host)
    run = mur("run", "--task", "Ada", "--json", cwd=hello, env=env)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0 and json.loads(out.splitlines()[-1])["result"] == "Hello, Ada!\n", err
    assert f"the capsule runs as pid {spare}," in err
    assert json.loads(out.splitlines()[0])["pid"] == spare
    deadline = time.monotonic() + 10
    while not (children_of(host) and spare not in children_of(host)) and time.monotonic() < deadline:
        time.sleep(0.05)
    [again] = children_of(host)  # the next one, forked once this one ended
    assert again != spare
    os.kill(host, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while Path(f"/proc/{again}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{again}").exists(), "the spare outlived its host"


def test_the_capsule_takes_the_clients_cgroup_uid_rlimits_and_umask(hello, home, host_env):
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (777, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        os.umask(0o027)

    warm = mur("run", "--task", "warm", cwd=hello, env=host_env)
    warm.communicate(timeout=120)
    idle = mur("run", "--json", "--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep",
               cwd=hello, env={**host_env, "MURMUR_A2A_TIMEOUT_SECS": "0"}, preexec_fn=limits)
    try:
        capsule = json.loads(idle.stdout.readline())["pid"]
        assert capsule != idle.pid and parent_of(capsule) == host_pid(home)
        assert Path(f"/proc/{capsule}/cgroup").read_text() == Path(f"/proc/{idle.pid}/cgroup").read_text()
        status = dict(line.split(":", 1) for line in Path(f"/proc/{capsule}/status").read_text().splitlines())
        client = dict(line.split(":", 1) for line in Path(f"/proc/{idle.pid}/status").read_text().splitlines())
        for key in ("Uid", "Gid", "Groups", "CapEff", "CapBnd", "NoNewPrivs", "Seccomp"):
            assert status[key].split() == client[key].split(), key
        assert status["Umask"].strip() == "0027"
        assert resource.prlimit(capsule, resource.RLIMIT_NOFILE)[0] == 777
        deadline = time.monotonic() + 30  # its lifecycle takes SIGTERM over once it serves
        while not catches(capsule, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.05)
        idle.send_signal(signal.SIGTERM)  # relayed to the capsule, which ends as a service does
        assert idle.wait(30) == 0
        assert not Path(f"/proc/{capsule}").exists() or Path(f"/proc/{capsule}/stat").read_text().split()[2] == "Z"
    finally:
        if idle.poll() is None:
            idle.kill()


def test_a_client_the_host_cannot_serve_as_itself_runs_the_capsule_itself(hello, home, host_env):
    import ctypes

    def no_new_privs() -> None:  # another security context than the host's
        ctypes.CDLL(None, use_errno=True).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS

    mur("run", "--task", "warm", cwd=hello, env=host_env).communicate(timeout=120)  # the host runs
    proc = mur("run", "--task", "Bo", "--json", cwd=hello, env=host_env, preexec_fn=no_new_privs)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    first, last = (json.loads(line) for line in out.splitlines())
    assert first["pid"] == proc.pid and last["result"] == "Hello, Bo!\n"  # in-process, as without a host


def test_a_client_killed_takes_its_capsule_with_it_and_a_burst_loses_none(hello, home, host_env):
    env = {**host_env, "MURMUR_A2A_TIMEOUT_SECS": "0"}
    mur("run", "--task", "warm", cwd=hello, env=host_env).communicate(timeout=120)
    idle = mur("run", "--json", "--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep",
               "--workdir", str(hello / "w-idle"), cwd=hello, env=env)
    capsule = json.loads(idle.stdout.readline())["pid"]
    idle.kill()  # SIGKILL: nothing relayed; the host sees the connection close
    idle.wait()
    deadline = time.monotonic() + 30
    while Path(f"/proc/{capsule}").exists() and time.monotonic() < deadline:
        if Path(f"/proc/{capsule}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{capsule}").exists() or Path(f"/proc/{capsule}/stat").read_text().split()[2] == "Z"
    burst = [mur("run", "--task", f"n{i}", "--json", "--workdir", str(hello / f"w{i}"), cwd=hello, env=host_env)
             for i in range(8)]
    outcomes = [p.communicate(timeout=180) for p in burst]
    assert [p.returncode for p in burst] == [0] * len(burst), [err for _, err in outcomes if err][:1]
    answers = sorted(json.loads(out.splitlines()[-1])["result"] for out, _ in outcomes)
    assert answers == sorted(f"Hello, n{i}!\n" for i in range(8))


def test_a_host_that_dies_takes_its_capsules_and_their_clients_say_so(hello, home, host_env):
    env = {**host_env, "MURMUR_A2A_TIMEOUT_SECS": "0"}
    mur("run", "--task", "warm", cwd=hello, env=host_env).communicate(timeout=120)
    idle = mur("run", "--json", "--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep",
               cwd=hello, env=env)
    try:
        capsule = json.loads(idle.stdout.readline())["pid"]
        os.kill(host_pid(home), signal.SIGKILL)
        assert idle.wait(30) == 1  # the client lost its capsule's host: a failed service, for its manager
        deadline = time.monotonic() + 30
        while Path(f"/proc/{capsule}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{capsule}").exists()  # PR_SET_PDEATHSIG: no orphan keeps the port
    finally:
        if idle.poll() is None:
            idle.kill()


def host_processes(home: Path) -> list[int]:
    """Capsule hosts of this HOME: their command line names their socket under it (started or not)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if b"__capsule-host" in argv and any(a.startswith(str(home).encode() + b"/") for a in argv):
            found.append(int(proc.name))
    return found


def test_by_default_one_shot_runs_in_a_row_leave_a_host_for_the_next(hello, home, host_env):
    env = {k: v for k, v in host_env.items() if k != "MUR_CAPSULE_HOST"}  # the default: auto
    env["MUR_CAPSULE_HOST_DEBUG"] = "2"
    for attempt in range(2):
        failing = mur("run", "--task", "x", "-m", "nowhere", cwd=hello, env=env)
        err = failing.communicate(timeout=60)[1]
        assert failing.returncode == 1 and "error[" in err
    assert host_processes(home) == []  # runs that failed leave nothing running
    for name, host_after in (("Ada", False), ("Bo", True)):  # a single run now and then never starts one
        proc = mur("run", "--task", name, "--json", cwd=hello, env=env)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert json.loads(out.splitlines()[0])["pid"] == proc.pid, err  # no host ran: this one never waits for one
        assert "no host runs" in err
        assert bool(host_processes(home)) is host_after, (name, host_processes(home))
    assert wait_for_host(home)
    third = mur("run", "--task", "Cy", "--json", cwd=hello, env=env)
    out, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    capsule = json.loads(out.splitlines()[0])["pid"]
    assert capsule != third.pid and f"the capsule runs as pid {capsule}, forked by the host" in err
    assert json.loads(out.splitlines()[-1])["result"] == "Hello, Cy!\n"


def test_the_host_holds_the_components_of_its_clients_cache(hello, home, host_env):
    """The host holds (maps) the compiled components its clients' capsules use, from their compile
    cache: here MUR_CACHE_DIR, not the host's own (an empty one under this HOME), where before it held
    nothing and every capsule loaded its components itself."""
    env = {**host_env, "MUR_WASM_TIERING": "off"}  # optimized entries: what the host holds
    run = mur("run", "--task", "Ada", cwd=hello, env=env)
    err = run.communicate(timeout=300)[1]
    assert run.returncode == 0, err
    host = host_pid(home)
    cache = str(Path(env["MUR_CACHE_DIR"]) / "wasm") + "/"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # held once the capsule has ended
        held = {line.split()[-1] for line in Path(f"/proc/{host}/maps").read_text().splitlines()
                if line.split()[-1].startswith(cache) and line.endswith(".cwasm")}
        if len(held) >= 2:
            break
        time.sleep(0.1)
    assert len(held) >= 2, "the capsule's two components (greet and the capsule) are held"
    again = mur("run", "--task", "Bo", "--json", cwd=hello, env=env)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0 and json.loads(out.splitlines()[-1])["result"] == "Hello, Bo!\n", err


def test_an_explain_at_a_terminal_goes_to_a_running_host(hello, home, host_env):
    """It reads nothing and only prints: a terminal loses nothing (a run's input prompts, its job control)."""
    from mur.testing.terminal import MurProcess

    plain = mur("run", "--explain-scope", cwd=hello, env={**host_env, "MUR_CAPSULE_HOST": "off"})
    expected, _ = plain.communicate(timeout=60)
    assert plain.returncode == 0 and "filesystem" in expected
    env = {k: v for k, v in host_env.items() if k != "MUR_CAPSULE_HOST"}  # the default: auto
    mur("run", "--task", "warm", cwd=hello, env=host_env).communicate(timeout=120)  # the host runs
    with MurProcess("run", "--explain-scope", cwd=hello, env={**env, "MUR_CAPSULE_HOST_DEBUG": "2"},
                    tty=True) as shown:
        assert shown.finish(60) == 0
    assert "forked by the host" in shown.stderr, shown.stderr
    assert shown.stdout == expected


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_task_run_at_a_terminal_goes_to_a_running_host_and_keeps_its_job_control(hello, home, host_env):
    """Ctrl-Z stops the capsule, not only its client (the capsule is in a session of the host's
    making, so the terminal's SIGTSTP reaches only the client, which relays it); `fg` continues both."""
    from mur.testing.terminal import MurProcess

    mur("run", "--task", "warm", cwd=hello, env=host_env).communicate(timeout=120)  # the host runs
    env = {k: v for k, v in host_env.items() if k != "MUR_CAPSULE_HOST"}  # the default: auto
    env.update(MUR_CAPSULE_HOST_DEBUG="2", MURMUR_A2A_TIMEOUT_SECS="6")  # it lingers for queued tasks
    with MurProcess("run", "--task", "Ada", "--lifecycle-task-acceptance", "queue", cwd=hello, env=env,
                    tty=True) as run:
        run.wait_for(lambda: "forked by the host" in run.stderr and "status" not in run.stderr
                     and "waiting" in run.stderr, timeout=60, what="the capsule lingering in the host")
        capsule = int(run.stderr.split("the capsule runs as pid ", 1)[1].split()[0].rstrip(","))
        assert parent_of(capsule) == host_pid(home)
        os.killpg(run.proc.pid, signal.SIGTSTP)  # what the terminal sends on Ctrl-Z
        deadline = time.monotonic() + 10
        while (state(capsule), state(run.proc.pid)) != ("T", "T") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (state(capsule), state(run.proc.pid)) == ("T", "T"), "Ctrl-Z left the capsule running"
        os.killpg(run.proc.pid, signal.SIGCONT)  # the shell's fg
        assert run.finish(60) == 0, run.stderr
    assert "Hello, Ada!" in run.stdout and "status:  ok" in run.stderr


def test_by_default_a_service_run_goes_to_the_host(hello, home, host_env):
    env = {k: v for k, v in host_env.items() if k != "MUR_CAPSULE_HOST"}  # the default: auto
    for value, hosted in ((None, True), ("off", False)):
        if value is not None:
            env["MUR_CAPSULE_HOST"] = value
        service = mur("run", "--json", "--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep",
                      "--workdir", str(hello / f"w-{value}"), cwd=hello, env={**env, "MURMUR_A2A_TIMEOUT_SECS": "0"})
        try:
            capsule = json.loads(service.stdout.readline())["pid"]
            if hosted:
                assert capsule != service.pid and parent_of(capsule) == host_pid(home)
            else:
                assert capsule == service.pid
            service.send_signal(signal.SIGTERM)  # relayed to the capsule, which stops as a service does
            assert service.wait(30) in (0, -signal.SIGTERM, 128 + signal.SIGTERM)
        finally:
            if service.poll() is None:
                service.kill()


def test_a_new_host_sweeps_what_hosts_of_other_builds_left_and_never_a_live_ones(hello, home, host_env):
    """Hosts of other code (an older mur, an edit) that died unannounced (kill -9, a reboot) left
    their socket, `.last` and a `.lock` naming a pid that may be anyone's now: the next host to
    start removes them; a lock another build's live host holds stays. A host that ends clears its pid."""
    import fcntl

    run_dir = home / ".murmur" / "run"
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    dead, live = run_dir / "caphost-0000000000000dead.sock", run_dir / "caphost-00000000000000a1.sock"
    for path in (dead, live):
        for suffix in ("", ".last", ".lock"):
            Path(f"{path}{suffix}").write_text(f"{os.getpid()}\n" if suffix == ".lock" else "")
    lockless = run_dir / "caphost-00000000000000b2.sock"  # a build whose lock is gone already
    for suffix in ("", ".last"):
        Path(f"{lockless}{suffix}").write_text("")
    held = os.open(f"{live}.lock", os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # another build's host, alive
    try:
        assert host_pids(home) == [os.getpid()], "a held lock names a live host; the dead one's pid is not taken"
        proc = mur("run", "--task", "Ada", cwd=hello, env=host_env)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out == "Hello, Ada!\n", err
        [ours] = [p for p in host_pids(home) if p != os.getpid()]
        assert [p.name for p in run_dir.iterdir() if p.name.startswith((dead.name, lockless.name))] == []
        assert all(Path(f"{live}{suffix}").exists() for suffix in ("", ".last", ".lock"))
    finally:
        os.close(held)
    stop_hosts(home)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{ours}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    [own] = [p for p in run_dir.glob("caphost-*.sock.lock") if p != Path(f"{live}.lock")]
    assert own.read_text() == "", "an ended host leaves no pid"
