"""`python -m mur.testing.a2a_harness`: the echo capsule served over A2A, ended by SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import httpx

from mur.testing.a2a_harness import message


def test_serves_echo_until_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "mur.testing.a2a_harness", "--workdir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        assert info["workdir"] == str(tmp_path) and info["pid"] == proc.pid
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message("hi")}}
        task = httpx.post(info["url"] + "/", json=body, timeout=10).json()["result"]
        for _ in range(100):
            got = httpx.post(info["url"] + "/", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                                                      "params": {"id": task["id"]}}, timeout=10).json()["result"]
            if got["status"]["state"] == "completed":
                break
            time.sleep(0.05)
        assert got["artifacts"][0]["parts"][0]["text"] == "echo: hi"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
