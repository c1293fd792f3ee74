"""SIGTERM to a process serving a queue capsule: the running task finishes or fails, the waiting
ones are rejected, the trace is flushed, and the process exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from mur.testing.a2a_harness import message

SCRIPT = Path(__file__).with_name("sigterm_capsule.py")


class Capsule:
    def __init__(self, mode: str, workdir: Path, grace: float):
        self.workdir = workdir
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), mode, str(workdir), str(grace)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()
        self.base = "http://" + json.loads(line)["url"]
        self.http = httpx.Client(base_url=self.base, timeout=10)
        self.frames: list[tuple[str, dict]] = []
        self._watch_ready = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        assert self._watch_ready.wait(5)

    def _watch(self) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}
        try:
            with httpx.stream("POST", self.base + "/", json=body, timeout=httpx.Timeout(10, read=None)) as response:
                event = None
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        event = line[7:]
                        self._watch_ready.set()
                    elif line.startswith("data: "):
                        self.frames.append((event, json.loads(line[6:])))
        except httpx.HTTPError:
            pass
        finally:
            self._watch_ready.set()

    def send(self, text: str) -> str:
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message(text)}}
        return self.http.post("/", json=body).json()["result"]["id"]

    def state(self, task_id: str) -> str:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
        return self.http.post("/", json=body).json()["result"]["status"]["state"]

    def wait_state(self, task_id: str, state: str) -> None:
        deadline = time.monotonic() + 10
        while self.state(task_id) != state:
            assert time.monotonic() < deadline
            time.sleep(0.02)

    def terminate(self, timeout: float = 20) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
            assert "Traceback" not in self.proc.stderr.read()
            return code
        finally:
            self._watcher.join(5)
            self.http.close()

    def trace(self) -> list[dict]:
        lines = (self.workdir / "trace.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def finals(self) -> dict[str, dict]:
        return {data["id"]: data["status"] for event, data in self.frames if event == "status" and data.get("final")}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def capsule(tmp_path):
    made: list[Capsule] = []

    def start(mode: str, grace: float = 5.0) -> Capsule:
        workdir = tmp_path / mode
        workdir.mkdir()
        made.append(Capsule(mode, workdir, grace))
        return made[-1]

    yield start
    for c in made:
        c.kill()


def _common_checks(c: Capsule, running: str, waiting: list[str]) -> dict:
    finals = c.finals()
    for task_id in waiting:
        assert finals[task_id]["state"] == "rejected"
        assert finals[task_id]["message"] == "task rejected: the session ended before this task started"
    events = c.trace()
    assert events[-1] == {"event_type": "session_end", "exit_status": "ok"}
    (end,) = [e for e in events if e["event_type"] == "task_end"]
    assert end["task_id"] == running
    assert [e["task_id"] for e in events if e["event_type"] == "task_start"] == [running]
    return end


def test_sigterm_lets_the_running_task_finish(capsule):
    c = capsule("finishes")
    running = c.send("the job")
    c.wait_state(running, "working")
    waiting = [c.send("later 1"), c.send("later 2")]
    assert c.terminate() == 0
    end = _common_checks(c, running, waiting)
    assert end["exit_status"] == "ok"
    assert c.finals()[running]["state"] == "completed"
    assert (c.workdir / "out" / "result.txt").read_text() == "finished the job"


def test_sigterm_cooperative_executor_fails_early(capsule):
    c = capsule("cooperative")
    running = c.send("the job")
    c.wait_state(running, "working")
    waiting = [c.send("later")]
    started = time.monotonic()
    assert c.terminate() == 0
    assert time.monotonic() - started < 4
    end = _common_checks(c, running, waiting)
    assert end["exit_status"] == "failed"
    assert c.finals()[running]["message"] == "stopped early: the capsule is shutting down"


def test_sigterm_interrupts_a_stubborn_executor_after_the_grace(capsule):
    c = capsule("stubborn", grace=1.0)
    running = c.send("the job")
    c.wait_state(running, "working")
    started = time.monotonic()
    assert c.terminate() == 0
    assert 0.9 < time.monotonic() - started < 8
    end = _common_checks(c, running, [])
    assert end["exit_status"] == "failed"
    assert c.finals()[running] == {"state": "failed", "message": "terminated: the capsule received SIGTERM"}
    assert (c.workdir / "out" / "result.txt").read_text() == "error: terminated: the capsule received SIGTERM"


def test_sigterm_ends_a_request_input_wait(capsule):
    c = capsule("input")
    running = c.send("ask me")
    c.wait_state(running, "input-required")
    assert c.terminate() == 0
    end = _common_checks(c, running, [])
    assert end["exit_status"] == "failed"
    assert c.finals()[running]["message"] == "terminated: the capsule received SIGTERM"


def test_sigterm_while_idle_exits_cleanly(capsule):
    c = capsule("finishes")
    assert c.terminate() == 0
    assert c.trace() == [{"event_type": "session_end", "exit_status": "ok"}]
    assert os.path.exists(c.workdir / "trace.jsonl")
