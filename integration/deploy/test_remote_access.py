"""An SSH deployment reached from the operator's machine, as an operator would (issue 26, item 3): an sshd
container (testcontainers, host network, loopback), a non-root deploy user, the real CLI from a clean
HOME. `mur send / watch / cancel ID` reach the loopback-bound service with no tunnel opened by hand
and no `ssh` process (a fake `ssh` first on PATH records any call), and leave no SSH connection
behind, also after Ctrl-C; `mur deploy logs` shows a line per task (plain, --json, -f); `mur trace
show|steps --deployment` read the target's traces, and follow no link planted in the session tree."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy_support import ROOT, mur, mur_json

pytestmark = [pytest.mark.requires_docker, pytest.mark.requires_sshd, pytest.mark.slow]

FAKE_SSH = "#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/ssh-was-called\"\nexit 255\n"


def target_args(vm, user: str) -> list[str]:
    # the address as one word, USER@HOST:PORT (mur.deploy.targets.address): the other SSH tests give
    # --ssh-user and --ssh-port apart; the record, status and every reach below see the same target
    return ["--host", f"{user}@127.0.0.1:{vm.port}", "--ssh-key", str(vm.key), "--known-hosts", str(vm.known_hosts())]


def ssh_connections(port: int) -> int:
    """ESTABLISHED TCP connections to or from `port` on this machine (the container shares its network)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "01" and port in (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)):
                count += 1
    return count


def settled(port: int, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while ssh_connections(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    return ssh_connections(port)


def popen(home: Path, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mur", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env, "HOME": str(home)}, cwd=str(ROOT),
                            start_new_session=True)


def read_until(proc: subprocess.Popen, wanted, timeout: float = 60) -> list[str]:
    """stdout lines of `proc` until one satisfies `wanted` (fails the test after `timeout`)."""
    lines = getattr(proc, "lines", None)
    if lines is None:  # one reader thread per process: its lines queue up for every later call
        import queue
        import threading

        lines = proc.lines = queue.Queue()  # type: ignore[attr-defined]
        threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in proc.stdout], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=0.5))
        except Exception:  # noqa: BLE001 - queue.Empty: keep waiting
            continue
        if wanted(seen[-1]):
            return seen
    raise AssertionError(f"not seen within {timeout}s; got {seen}")


def interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole foreground group
    proc.wait(timeout=30)
    return proc.returncode, proc.stderr.read()


def test_send_logs_and_traces_of_an_ssh_deployment(sshd_vm, home, runtime_bundle, hello_capsule, tmp_path):
    vm = sshd_vm
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ssh").write_text(FAKE_SSH)
    (fake / "ssh").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}"}

    res = mur_json("deploy", "-m", str(hello_capsule / "murmur.yaml"), *target_args(vm, "deployer"), home=home)
    dep = res["deployment_id"]
    assert res["tunnel"].startswith("ssh -N ")  # still printed, for other clients
    human = mur("deploy", "status", dep, home=home, env=env).stdout
    assert f'reach     mur send {dep} "<task>"' in human and "answers   yes" in human
    assert f"tunnel    {res['tunnel']}" in human
    assert settled(vm.port) == 0

    # send by id, then by the recorded URL: no tunnel opened by hand, no ssh process
    sent = mur("send", dep, "world", home=home, env=env)
    assert sent.stdout == "Hello, world!\n"
    assert mur("send", res["url"], "url", home=home, env=env).stdout == "Hello, url!\n"
    task = json.loads(mur("send", dep[:12], "json", "--json", home=home, env=env).stdout)
    assert task["status"]["state"] == "completed"
    assert settled(vm.port) == 0, "an SSH connection outlived mur send"

    watched = mur("watch", dep, "--task", task["id"], home=home, env=env)
    assert "Hello, json!" in watched.stdout
    cancel = mur("cancel", dep, task["id"], home=home, env=env, check=False)  # reached: the service answers
    assert "cannot reach" not in cancel.stderr and (cancel.returncode == 0 or "tasks/cancel failed" in cancel.stderr)

    # Ctrl-C of a watch that would follow forever: it ends, and so does its SSH connection
    watch = popen(home, env, "watch", dep)
    read_until(watch, lambda line: "task started" in line)  # the buffer replayed: the stream is open
    assert ssh_connections(vm.port) >= 1
    code, err = interrupt(watch)
    assert code == 130 and "Traceback" not in err, err
    assert settled(vm.port) == 0, "the forward outlived an interrupted mur watch"

    # the log: a line per task start and end, after the session's startup line
    logs = mur("deploy", "logs", dep, home=home, env=env).stdout.splitlines()
    startup = next(i for i, line in enumerate(logs) if line.startswith('{"url"'))
    tasks = [line for line in logs if line.startswith("[mur task ")]
    assert len(tasks) == 6 and logs[startup + 1: startup + 7] == tasks, logs
    assert " started (a2a) in ses_" in tasks[0] and tasks[1].split("] ")[1].split()[1:3] == ["ok", tasks[1].split()[5]]
    as_json = mur_json("deploy", "logs", dep, home=home, env=env)
    assert [t["event"] for t in as_json["tasks"]] == ["start", "end"] * 3
    assert as_json["tasks"][-1]["task_id"] == task["id"] and as_json["tasks"][-1]["status"] == "ok"

    follow = popen(home, env, "deploy", "logs", dep, "-f", "--json")
    read_until(follow, lambda line: json.loads(line).get("task", {}).get("task_id") == task["id"])
    mur("send", dep, "live", home=home, env=env)
    seen = read_until(follow, lambda line: json.loads(line).get("task", {}).get("event") == "end")
    assert json.loads(seen[-1])["task"]["status"] == "ok"
    code, err = interrupt(follow)
    assert code == 130 and "Traceback" not in err, err

    # the traces, read where they run
    show = json.loads(mur("trace", "show", "--deployment", dep, "--json", home=home, env=env).stdout)
    assert show["session_id"] == json.loads(logs[startup])["session_id"]
    assert [c["tool_name"] for c in show["tool_calls"]["calls"]] == ["greet"] * 4
    assert show["trace"].startswith(f"deployer@127.0.0.1:{vm.port}:/home/deployer/.murmur/deployments/{dep}/releases/")
    steps = mur("trace", "steps", "-v", "-d", dep, show["session_id"][-6:], home=home, env=env).stdout
    assert steps.count("     tool_call   greet  ✓ ok") == 4

    # links planted in the session tree are never followed (the runtime's own tree; a tool cannot
    # write it, but the reader does not rely on that)
    base = f"/home/deployer/.murmur/deployments/{dep}/releases/1/workdir"
    linked_dir, linked_trace = "ses_" + "a" * 32, "ses_" + "b" * 32
    vm.sh(f"ln -s /etc {base}/{linked_dir}; mkdir {base}/{linked_trace} && "
          f"ln -s /etc/passwd {base}/{linked_trace}/trace.jsonl && chown -R -h deployer {base}")
    for address in (linked_dir, linked_trace):
        r = mur("trace", "show", "-d", dep, address, home=home, env=env, check=False)
        assert r.returncode == 1 and r.stderr.startswith("error[E-TRC-002]") and "root:" not in r.stderr + r.stdout

    assert not (fake / "ssh-was-called").exists(), (fake / "ssh-was-called").read_text()
    mur("deploy", "destroy", dep, home=home)
    assert settled(vm.port) == 0
