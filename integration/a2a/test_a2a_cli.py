"""`mur send` and `mur watch` as processes against a live capsule service on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

from mur.a2a.lifecycle import TaskOutcome
from mur.testing.a2a_harness import Gate

QUEUE = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 4}


def mur(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, timeout=timeout)


def narrated(request, ctx):
    if request.text == "fail":
        return TaskOutcome("failed", "could not do it")
    ctx.emit("status", {"state": "working", "message": "inference turn 1"})
    ctx.emit("artifact", {"tool_name": "ls", "content": "a.txt\nb.txt"})
    return TaskOutcome("completed", f"echo: {request.text}")


def test_send_prints_the_result(make_service):
    h = make_service(narrated, **QUEUE)
    done = mur("send", h.url, "hello there")
    assert (done.returncode, done.stdout, done.stderr) == (0, "echo: hello there\n", "")


def test_send_json_is_one_line(make_service):
    h = make_service(narrated, **QUEUE)
    done = mur("send", "--json", h.base, "hi", "--context", "ctx_cli")
    assert done.returncode == 0
    (line,) = done.stdout.splitlines()
    task = json.loads(line)
    assert task["contextId"] == "ctx_cli" and task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"][0]["text"] == "echo: hi"


def test_send_failed_task_is_an_error(make_service):
    h = make_service(narrated, **QUEUE)
    done = mur("send", h.url, "fail")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error[E-A2A-001]: task tsk_")
    message, hint = done.stderr.rstrip().split("\n")
    assert message.endswith("failed: could not do it")
    assert hint == "  hint: its session's trace says why: `mur trace show` with the capsule's workdir"


def test_send_rejected_is_an_error(make_service):
    gate = Gate()
    h = make_service(gate, task_acceptance="single")
    h.send("occupy")
    assert gate.started.wait(5)
    done = mur("send", h.url, "me too")
    gate.release.set()
    assert done.returncode == 1
    assert "rejected: task rejected: capsule is busy" in done.stderr


def test_send_to_nothing_is_e_a2a_001():
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    done = mur("send", f"127.0.0.1:{port}", "anyone?")
    assert done.returncode == 1
    assert done.stderr.startswith(f"error[E-A2A-001]: http://127.0.0.1:{port}: cannot reach the capsule")
    assert "\n  hint: " in done.stderr and "Traceback" not in done.stderr


def test_send_timeout_names_the_task(make_service):
    gate = Gate()
    h = make_service(gate, **QUEUE)
    done = mur("send", h.url, "slow", "--timeout", "0.5")
    gate.release.set()
    assert done.returncode == 1
    assert "timed out after 0.5s waiting for task tsk_" in done.stderr
    assert f"mur watch {h.base} --task tsk_" in done.stderr


def test_send_input_required_then_reply(make_service):
    def asks(request, ctx):
        return TaskOutcome("completed", "branch " + ctx.request_input("which branch?"))

    h = make_service(asks, **QUEUE)
    first = mur("send", h.url, "deploy")
    assert first.returncode == 0
    assert first.stdout == "input required: which branch?\n"
    assert f'reply with: mur send {h.url} "<answer>"' in first.stderr
    second = mur("send", h.url, "main")
    assert (second.returncode, second.stdout) == (0, "branch main\n")


def test_watch_one_task(make_service):
    h = make_service(narrated, **QUEUE)
    task = h.send("watch me")
    h.wait(task["id"])
    done = mur("watch", h.url, "--task", task["id"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "[working]  task started\n"
        "[working]  inference turn 1\n"
        "[artifact] tool: ls | a.txt\n"
        "  b.txt\n"
        "[completed]\n"
        "  echo: watch me\n"
        "\n"
    )


def wait_for_line(lines: list[str], line: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while line not in lines:
        assert time.monotonic() < deadline, f"never saw {line!r} in {lines}"
        time.sleep(0.02)


def test_watch_follows_until_the_capsule_closes(make_service):
    h = make_service(narrated, **QUEUE)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mur", "watch", h.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout))
        reader.start()
        h.wait(h.send("one")["id"])
        wait_for_line(lines, "  echo: one\n")  # connected (it replays from the start of the buffer)
        h.wait(h.send("fail")["id"])
        wait_for_line(lines, "[failed]  could not do it\n")  # a final status does not end it
        assert proc.poll() is None
        h.service.shutdown()
        h.join()
        h.service.stop()
        assert proc.wait(20) == 0
        reader.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "[completed]\n" in lines and "  echo: one\n" in lines
    assert "[failed]  could not do it\n" in lines
    assert "[murmur] capsule closed" in proc.stderr.read()


def test_cancel_a_queued_task(make_service):
    gate = Gate()
    h = make_service(gate, **QUEUE)
    running = h.send("occupy")
    assert gate.started.wait(5)
    queued = h.send("later")["id"]
    done = mur("cancel", h.url, queued)
    assert (done.returncode, done.stdout) == (0, f"{queued} canceled\n")
    busy = mur("cancel", h.url, running["id"])
    gate.release.set()
    assert busy.returncode == 1 and busy.stderr.startswith("error[E-A2A-001]")
    assert "-32002 Task cannot be canceled: it is running" in busy.stderr
