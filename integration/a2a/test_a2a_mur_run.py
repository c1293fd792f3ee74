"""The door under a real `mur run` (examples/hello on wasmtime): `mur send`, `mur watch`, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path


def _env(home: Path) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "HOME": str(home),
            "MURMUR_A2A_TIMEOUT_SECS": "60",
            "MUR_CACHE_DIR": str(Path.home() / ".murmur" / "cache"),
        }
    )
    return env


def mur(*args: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mur", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_mur_run_queue_serves_send_and_watch_then_exits_0_on_sigterm(hello, tmp_path):
    env = _env(tmp_path / "home")
    (tmp_path / "home").mkdir()
    run = subprocess.Popen(
        [sys.executable, "-m", "mur", "run", "--json", "--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep"],
        cwd=hello,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = run.stdout.readline()
        assert first, run.stderr.read()
        startup = json.loads(first)
        url, workdir = startup["url"], Path(startup["workdir"])

        sent = mur("send", url, "Ada", env=env)
        assert (sent.returncode, sent.stdout) == (0, "Hello, Ada!\n"), sent.stderr
        again = mur("send", "--json", url, "Bo", env=env)
        task = json.loads(again.stdout)
        assert task["status"]["state"] == "completed"
        assert task["artifacts"][0]["parts"][0]["text"].strip() == "Hello, Bo!"

        watched = mur("watch", url, "--task", task["id"], env=env)
        assert watched.returncode == 0, watched.stderr
        assert watched.stdout.startswith("[working]  task started\n")
        assert "[completed]\n  Hello, Bo!\n" in watched.stdout

        run.send_signal(signal.SIGTERM)
        assert run.wait(60) == 0, run.stderr.read()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    events = [json.loads(line) for line in (workdir / "trace.jsonl").read_text().splitlines()]
    kinds = [e["event_type"] for e in events]
    assert kinds.count("a2a_task_received") == kinds.count("task_start") == kinds.count("task_end") == 2
    ends = [e for e in events if e["event_type"] == "task_end"]
    assert [e["exit_status"] for e in ends] == ["ok", "ok"]
    assert ends[1]["task_id"] == task["id"]
    assert not (workdir / "task.md").exists()  # queue mode deletes it after each task
    assert (workdir / "out" / "result.txt").read_text().strip() == "Hello, Bo!"
