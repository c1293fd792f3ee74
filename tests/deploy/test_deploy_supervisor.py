"""`mur supervise` with real processes: a stand-in runtime that speaks deploy's contract
(one startup JSON line, an agent card on --port), started, restarted, smoke-run and stopped."""

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

from mur.deploy import supervisor as sv
from mur.deploy.plan import render_env_file

FAKE = r'''#!{python}
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
assert args[0] == "run", args
port = int(args[args.index("--port") + 1])
mode = os.environ.get("FAKE_MODE", "ok")
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps({{"pid": os.getpid(), "mode": mode, "timeout": os.environ.get("MURMUR_A2A_TIMEOUT_SECS"),
                         "args": args}}) + "\n")
if mode == "crash":
    print("boom: cannot start", file=sys.stderr, flush=True)
    sys.exit(3)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"name": "fake", "url": f"http://127.0.0.1:{{port}}"}}).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
srv = HTTPServer(("127.0.0.1", port), H)
if mode == "child":
    import subprocess
    subprocess.Popen(["sleep", "300"])
print(json.dumps({{"url": f"localhost:{{port}}", "pid": os.getpid(), "session_id": "ses_x", "name": "fake",
                  "version": "1", "workdir": "/"}}), flush=True)
srv.serve_forever()
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def release(tmp_path, monkeypatch):
    rel = tmp_path / "releases" / "1"
    rel.mkdir(parents=True)
    fake = rel / "mur"
    fake.write_text(FAKE.format(python=sys.executable))
    fake.chmod(0o755)
    log = tmp_path / "fake.log"
    monkeypatch.setenv("FAKE_LOG", str(log))

    def make(mode: str = "ok", restart: str = "on-failure") -> dict:
        (rel / "env").write_bytes(render_env_file({"FAKE_MODE": mode, "FAKE_LOG": str(log)}))
        spec = {"deployment_id": "dep_test", "release_dir": str(rel), "port": free_port(), "bind": "127.0.0.1",
                "restart": restart, "user": None, "home": str(tmp_path), "run_dir": str(tmp_path / "run"),
                "log_file": str(tmp_path / "service.log"), "cgroup": {"name": f"dep_test{os.getpid()}",
                                                                   "memory_bytes": 1 << 30, "pids_max": 64},
                "run_args": ["--lifecycle-task-acceptance", "queue"]}
        (tmp_path / "run").mkdir(exist_ok=True)
        path = tmp_path / "service.json"
        path.write_text(json.dumps(spec))
        return {"spec": spec, "path": str(path), "log": log, "rel": rel}

    yield make
    run_dir = tmp_path / "run"
    if run_dir.exists():
        sv.stop(str(run_dir), timeout=15)


def wait_for(pred, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def launches(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_start_serve_restart_and_stop(release):
    r = release()
    state = sv.start_detached(r["path"])
    run_dir = r["spec"]["run_dir"]
    assert state["supervisor_pid"] and state["alive"]
    st = wait_for(lambda: (s := sv.read_state(run_dir)).get("state") == "running" and s)
    assert st["url"] == f"localhost:{r['spec']['port']}"
    assert sv.agent_card(f"http://127.0.0.1:{r['spec']['port']}", wait=5)["ok"]
    first = launches(r["log"])[0]
    assert first["timeout"] == "0" and "--lifecycle-task-acceptance" in first["args"]
    # A second start is a no-op while the supervisor lives.
    assert sv.start_detached(r["path"]).get("already_running")
    # The service dies: the supervisor starts it again.
    os.kill(st["child_pid"], signal.SIGKILL)
    st2 = wait_for(lambda: (s := sv.read_state(run_dir)).get("restarts") == 1 and s.get("state") == "running" and s)
    assert st2["child_pid"] != st["child_pid"]
    out = sv.stop(run_dir)
    assert out["was_running"] and out["state"] == "stopped" and not out["alive"]
    for pid in (st2["child_pid"], st2["supervisor_pid"]):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert "stopped" in Path(r["spec"]["log_file"]).read_text()


def test_stop_kills_the_whole_tree(release):
    r = release("child")
    sv.start_detached(r["path"])
    run_dir = r["spec"]["run_dir"]
    wait_for(lambda: sv.read_state(run_dir).get("state") == "running")
    child = sv.read_state(run_dir)["child_pid"]
    grandchildren = wait_for(lambda: [p for p in Path("/proc").iterdir() if p.name.isdigit() and
                                      _ppid(p) == child])
    sv.stop(run_dir)
    time.sleep(0.2)
    assert not any(p.exists() and "Z" not in (p / "stat").read_text().split()[2] for p in grandchildren)


def _ppid(p: Path) -> int:
    try:
        return int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def test_a_crashing_service_backs_off(release):
    r = release("crash")
    sv.start_detached(r["path"])
    run_dir = r["spec"]["run_dir"]
    st = wait_for(lambda: (s := sv.read_state(run_dir)).get("restarts", 0) >= 2 and s, timeout=30)
    assert st["state"] in ("backoff", "starting") and st["last_exit"] == 3
    times = [json.loads(x)["pid"] for x in r["log"].read_text().splitlines()]
    assert len(times) >= 2
    assert "boom: cannot start" in Path(r["spec"]["log_file"]).read_text()


def test_on_failure_does_not_restart_a_clean_exit(release, tmp_path):
    r = release("ok", restart="on-failure")
    # stand-in: make the runtime exit 0 at once
    (r["rel"] / "mur").write_text(f"#!{sys.executable}\nimport sys; print('{{}}'); sys.exit(0)\n")
    proc = subprocess.run([sys.executable, "-m", "mur", "supervise", "--foreground", "--spec", r["path"]],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    st = sv.read_state(r["spec"]["run_dir"])
    assert st["state"] == "exited" and st["restarts"] == 0 and st["last_exit"] == 0


def test_smoke_reports_success_and_failure(release):
    r = release("ok")
    res = sv.smoke(r["spec"], str(r["rel"]), free_port(), timeout=20)
    assert res["ok"] and res["agent_card"]["name"] == "fake"
    assert not (r["rel"] / ".smoke").exists()
    r = release("crash")
    res = sv.smoke(r["spec"], str(r["rel"]), free_port(), timeout=20)
    assert not res["ok"] and "exited with status 3" in res["error"] and "boom" in res["stderr"]


def test_child_env_is_clean_and_carries_the_env_file(release, monkeypatch):
    r = release("ok")
    monkeypatch.setenv("SECRET_FROM_DEPLOYER", "x")
    env = sv.child_env(r["spec"], str(r["rel"]), None)
    assert "SECRET_FROM_DEPLOYER" not in env and env["FAKE_MODE"] == "ok"
    assert env["MURMUR_A2A_TIMEOUT_SECS"] == "0"


def test_cli_supervise_status_and_agent_card(release, tmp_path):
    r = release("ok")
    out = subprocess.run([sys.executable, "-m", "mur", "supervise", "--status", "--run-dir", r["spec"]["run_dir"]],
                         capture_output=True, text=True)
    assert json.loads(out.stdout)["state"] == "absent"
    out = subprocess.run([sys.executable, "-m", "mur", "supervise", "--agent-card", f"http://127.0.0.1:{free_port()}",
                          "--wait", "1"], capture_output=True, text=True)
    assert out.returncode == 1 and json.loads(out.stdout)["ok"] is False
