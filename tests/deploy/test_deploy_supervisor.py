"""The mur supervisor with real processes, driven by the same shell commands deploy sends
(mur.deploy.init.supervisor) through this machine's shell: a stand-in runtime that speaks deploy's
contract (one startup JSON line, an agent card and a bearer-token check on --port) is started,
restarted, smoke-run and stopped; recorded pids are trusted only with their identity."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mur.deploy import procid
from mur.deploy import supervisor as sv
from mur.deploy.env import render_env_file
from mur.deploy.init import init_for, prestart_script
from mur.deploy.plan import service_spec
from mur.deploy.steps import Layout, ServiceConfig
from mur.deploy.targets.local import LocalTarget

SUPERVISOR = init_for("supervisor")

FAKE = r'''#!/bin/sh
if [ "$1" = supervise ]; then exec {python} -m mur "$@"; fi
exec {python} - "$@" <<'PY'
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
assert args[0] == "run", args
port = int(args[args.index("--port") + 1])
mode = os.environ.get("FAKE_MODE", "ok")
token_file = os.environ.get("MURMUR_A2A_TOKEN_FILE")
token = open(token_file).read().strip() if token_file and os.path.exists(token_file) else None
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps({{"pid": os.getpid(), "mode": mode, "timeout": os.environ.get("MURMUR_A2A_TIMEOUT_SECS"),
                         "tmpdir": os.environ.get("TMPDIR"), "args": args}}) + "\n")
if mode == "crash":
    print("boom: cannot start", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "exit0":
    print("{{}}", flush=True)
    sys.exit(0)
class H(BaseHTTPRequestHandler):
    def _send(self, code, body):
        self.send_response(code); self.send_header("content-length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._send(200, json.dumps({{"name": "fake", "url": f"http://127.0.0.1:{{port}}"}}).encode())
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        ok = token is None or self.headers.get("authorization") == f"Bearer {{token}}"
        self._send(200 if ok else 401, b'{{"jsonrpc":"2.0","id":null,"result":{{}}}}')
    def log_message(self, *a): pass
srv = HTTPServer(("127.0.0.1", port), H)
if mode == "child":
    import subprocess
    subprocess.Popen(["sleep", "300"])
print(json.dumps({{"url": f"localhost:{{port}}", "pid": os.getpid(), "session_id": "ses_x"}}), flush=True)
srv.serve_forever()
PY
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def deployment(tmp_path, monkeypatch):
    """A deployment layout under a scratch home, with a stand-in runtime as `current/mur`."""
    home = tmp_path / "home"
    lay = Layout(str(home), f"dep_{os.getpid():08x}{int(time.time() * 1000) & 0xffffff:06x}" + "0" * 18)
    rel = Path(lay.release(1))
    for d in (rel / "workdir", Path(lay.run_dir), Path(lay.log_dir), Path(lay.tmp_dir)):
        d.mkdir(parents=True, exist_ok=True)
    (rel / "mur").write_text(FAKE.format(python=sys.executable))
    (rel / "mur").chmod(0o755)
    os.symlink("releases/1", lay.current)
    log = tmp_path / "fake.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    target = LocalTarget()

    def make(mode: str = "ok", restart: str = "on-failure", keep_sessions: int = 5) -> dict:
        (rel / "env").write_bytes(render_env_file({"FAKE_MODE": mode, "FAKE_LOG": str(log)}))
        svc = ServiceConfig(port=free_port(), restart=restart, keep_sessions=keep_sessions,
                            run_args=("--lifecycle-task-acceptance", "queue"))
        spec = service_spec(lay, lay.current, svc)
        (rel / "service.json").write_text(json.dumps(spec))
        (rel / "prestart.sh").write_text(prestart_script(lay, keep_sessions))
        (rel / "release.json").write_text(json.dumps({"n": 1}))  # written last: a complete release
        return {"spec": spec, "port": svc.port, "lay": lay, "rel": rel, "log": log}

    yield make
    target.run(SUPERVISOR.stop(lay, False)[0].cmd, check=False)


def sh(cmd: str) -> str:
    return LocalTarget().run(cmd, check=False).stdout


def state(lay: Layout):
    return SUPERVISOR.parse_status(sh(SUPERVISOR.status(lay, False).cmd))


def start(lay: Layout) -> str:
    return sh(SUPERVISOR.start(lay, False)[0].cmd)


def stop(lay: Layout) -> None:
    sh(SUPERVISOR.stop(lay, False)[0].cmd)


def wait_for(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def launches(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] not in "ZX"
    except OSError:
        return False


def child_pid(lay: Layout) -> int:
    return int(json.loads(Path(lay.state_file).read_text())["child_pid"])


def test_start_serve_restart_after_kill_9_and_stop(deployment):
    d = deployment()
    lay = d["lay"]
    start(lay)
    st = wait_for(lambda: (s := state(lay)).ready and s)
    assert st.running and st.restarts == 0
    first = launches(d["log"])[0]
    assert first["timeout"] == "0" and "--lifecycle-task-acceptance" in first["args"]
    assert first["tmpdir"] == lay.tmp_dir  # staged payloads live inside the deployment
    assert "already running" in start(lay)  # idempotent while the recorded supervisor lives
    old = child_pid(lay)
    os.kill(old, signal.SIGKILL)  # kill -9 of the service: the supervisor starts it again
    st2 = wait_for(lambda: (s := state(lay)).restarts == 1 and s.ready and s)
    assert child_pid(lay) != old and st2.running
    sup = procid.recorded_pid(lay.supervisor_pid)
    kid = child_pid(lay)
    stop(lay)
    assert not alive(sup) and not alive(kid)
    assert state(lay).state == "stopped" and not Path(lay.supervisor_pid).exists()
    assert "stopped" in Path(lay.log_file).read_text()


def test_a_restart_runs_to_its_end_when_its_channel_is_gone(deployment):
    """What sshd leaves a command whose client went: stdout and stderr lead nowhere (a write is a
    SIGPIPE) and no signal comes. The one restart command still stops the old supervisor and starts
    a new one that serves."""
    d = deployment()
    lay = d["lay"]
    start(lay)
    wait_for(lambda: state(lay).ready)
    old_sup, old_kid = procid.recorded_pid(lay.supervisor_pid), child_pid(lay)
    (cmd,) = [step.cmd for step in SUPERVISOR.start(lay, False, restart=True)]
    r, w = os.pipe()
    os.close(r)  # the channel is gone before the command writes anything
    shell = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.DEVNULL, stdout=w, stderr=w,
                             restore_signals=True)
    os.close(w)
    assert shell.wait(timeout=90) == 0
    assert not alive(old_sup) and not alive(old_kid)
    st = wait_for(lambda: (s := state(lay)).ready and s)
    assert st.pid not in (None, old_sup) and len(launches(d["log"])) == 2
    # the restart held the run directory while it ran (a lock holder waits for it, mur.deploy.lock);
    # the supervisor it started does not keep that flock for its life
    assert subprocess.run(["flock", "-n", lay.run_dir, "true"]).returncode == 0


def test_stop_kills_the_whole_tree(deployment):
    d = deployment("child")
    lay = d["lay"]
    start(lay)
    wait_for(lambda: state(lay).ready)
    kid = child_pid(lay)
    grandchildren = wait_for(lambda: [p for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == kid])
    stop(lay)
    time.sleep(0.2)
    assert not any(alive(int(p.name)) for p in grandchildren)


def _ppid(p: Path) -> int:
    try:
        return int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def test_a_recorded_pid_of_an_unrelated_process_is_never_trusted_or_signalled(deployment):
    """After an unclean restart the pid file can name someone else's process: status does not call
    it alive, start starts a supervisor anyway, stop and destroy never signal it."""
    d = deployment()
    lay = d["lay"]
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        Path(lay.supervisor_pid).write_text(f"{stranger.pid} 1 {procid.boot_id()}\n")  # same pid, other process
        Path(lay.child_pid).write_text(f"{stranger.pid} 1 {procid.boot_id()}\n")
        Path(lay.state_file).write_text(json.dumps({"state": "running", "url": "x", "supervisor_pid": stranger.pid}))
        st = state(lay)
        assert not st.running and st.state == "dead"
        stop(lay)
        assert alive(stranger.pid)
        assert "already running" not in start(lay)
        wait_for(lambda: state(lay).ready)
        stop(lay)
        assert alive(stranger.pid)
        # a pid recorded in an earlier boot is not this process either, even with the right start time
        Path(lay.supervisor_pid).write_text(f"{stranger.pid} {procid.start_time(stranger.pid)} another-boot\n")
        assert procid.recorded_pid(lay.supervisor_pid) is None and not state(lay).running
        stop(lay)
        assert alive(stranger.pid)
    finally:
        stranger.kill()
        stranger.wait()


def test_a_supervisor_killed_with_sigkill_is_replaced_and_its_service_reaped(deployment):
    d = deployment()
    lay = d["lay"]
    start(lay)
    wait_for(lambda: state(lay).ready)
    orphan = child_pid(lay)
    os.kill(procid.recorded_pid(lay.supervisor_pid), signal.SIGKILL)
    wait_for(lambda: not state(lay).running)
    assert alive(orphan)  # still holding the port
    start(lay)
    wait_for(lambda: state(lay).ready and child_pid(lay) != orphan)
    wait_for(lambda: not alive(orphan), timeout=10)
    stop(lay)


def test_a_second_supervisor_of_one_deployment_leaves_at_once(deployment):
    """A start the next stop could not see (its link cut before the supervisor wrote its pid file)
    and a later start: the second supervisor exits without touching the first one or its service."""
    d = deployment()
    lay = d["lay"]
    start(lay)
    wait_for(lambda: state(lay).ready)
    sup, kid = procid.recorded_pid(lay.supervisor_pid), child_pid(lay)
    second = subprocess.run([sys.executable, "-m", "mur", "supervise", "run", "--spec", f"{lay.current}/service.json"],
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert "another supervisor of this deployment runs" in Path(lay.log_file).read_text()
    assert procid.recorded_pid(lay.supervisor_pid) == sup and child_pid(lay) == kid and alive(kid)
    assert state(lay).ready and len(launches(d["log"])) == 1
    stop(lay)


def test_a_start_returns_once_its_supervisor_is_recorded_so_a_stop_right_after_sees_it(deployment):
    """The race a cut link made (a restart that went out, then the deploy's undo restarting too):
    a start used to return at the fork, ~1-3 s before the new supervisor wrote its pid file; a stop
    or start in that window found none, removed the file the new one was writing and started a
    second; the first served on with no pid file (status: nothing runs) and the next stop killed its
    service without stopping it. Now a start returns once the supervisor has recorded itself, and
    a restart right after it stops that supervisor and leaves exactly one."""
    d = deployment()
    lay = d["lay"]
    start(lay)
    first = procid.recorded_pid(lay.supervisor_pid)
    assert first is not None and alive(first), "the start returned before its supervisor was recorded"
    assert "already running" in start(lay)  # a second start right after sees it
    sh(SUPERVISOR.start(lay, False, restart=True)[0].cmd)  # the undo's restart, at once
    second = procid.recorded_pid(lay.supervisor_pid)
    assert second is not None and second != first and not alive(first)
    st = wait_for(lambda: (s := state(lay)).ready and s)
    assert st.running
    supervisors = [p for p in os.listdir("/proc") if p.isdigit() and alive(int(p))
                   and f"{lay.current}/service.json".encode() in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert supervisors == [str(second)], supervisors
    stop(lay)


def test_a_crashing_service_backs_off(deployment):
    d = deployment("crash")
    lay = d["lay"]
    start(lay)
    st = wait_for(lambda: (s := state(lay)).restarts >= 2 and s, timeout=30)
    assert st.state in ("backoff", "starting") and st.last_exit == 3 and st.looping
    assert len(launches(d["log"])) >= 2
    assert "boom: cannot start" in Path(lay.log_file).read_text()


def test_on_failure_does_not_restart_a_clean_exit(deployment):
    d = deployment("exit0", restart="on-failure")
    proc = subprocess.run([sys.executable, "-m", "mur", "supervise", "run", "--spec", f"{d['lay'].current}/service.json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    st = state(d["lay"])
    assert st.state == "exited" and st.restarts == 0 and st.exited


def test_prestart_sweeps_payloads_and_keeps_a_bounded_number_of_sessions(deployment):
    d = deployment(keep_sessions=2)
    lay = d["lay"]
    stale = Path(lay.tmp_dir) / "mur-payloads-stale"
    stale.mkdir()
    (stale / "greet.wasm").write_bytes(b"x" * 1000)
    sessions = Path(lay.release(1)) / "workdir"
    for i in range(5):
        (sessions / f"ses_{i}").mkdir(parents=True)
        os.utime(sessions / f"ses_{i}", (1000 + i, 1000 + i))
    start(lay)
    wait_for(lambda: state(lay).ready)
    assert not stale.exists()
    assert sorted(p.name for p in sessions.iterdir()) == ["ses_3", "ses_4"]
    stop(lay)


def test_smoke_checks_the_token_and_cleans_up(deployment):
    d = deployment()
    lay = d["lay"]
    res = sv.smoke(d["spec"], str(d["rel"]), free_port(), timeout=30)
    assert res["ok"] and res["agent_card"]["name"] == "fake"
    assert not (d["rel"] / ".smoke").exists() and not Path(lay.run_dir, "smoke.pid").exists()
    Path(d["spec"]["env"]["MURMUR_A2A_TOKEN_FILE"]).write_text("good-token\n")  # the release's own token
    res = sv.smoke(d["spec"], str(d["rel"]), free_port(), timeout=30)
    assert res["ok"], res  # the service reads the token file it was given; smoke sends the same token
    d = deployment("crash")
    res = sv.smoke(d["spec"], str(d["rel"]), free_port(), timeout=20)
    assert not res["ok"] and "exited with status 3" in res["error"] and "boom" in res["stderr"]
    assert not Path(lay.run_dir, "smoke-parent.pid").exists()
    # a release removed under it (an undo after a cut link) is never recreated by a late smoke start
    (d["rel"] / "release.json").unlink()
    res = sv.smoke(d["spec"], str(d["rel"]), free_port(), timeout=20)
    assert not res["ok"] and "not a complete release" in res["error"] and not (d["rel"] / ".smoke").exists()


def test_child_env_is_clean_and_carries_the_env_file(deployment, monkeypatch):
    d = deployment()
    monkeypatch.setenv("SECRET_FROM_DEPLOYER", "x")
    env = sv.child_env(d["spec"], str(d["rel"]), None)
    assert "SECRET_FROM_DEPLOYER" not in env and env["FAKE_MODE"] == "ok"
    assert env["MURMUR_A2A_TIMEOUT_SECS"] == "0" and env["MURMUR_A2A_TOKEN_FILE"] == d["lay"].token_file(d["lay"].current)
    assert env["TMPDIR"] == d["lay"].tmp_dir
    assert env["MUR_CAPSULE_HOST"] == "off"  # a service runs its capsule itself unless its env file says on
