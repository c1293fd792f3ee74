"""Lifecycle modes over real HTTP: none / single / queue, after_task, queue_depth, idle timeout,
request-input, threaded conversations, workdir outputs and trace events."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from mur.a2a.lifecycle import CapsuleService, TaskOutcome
from mur.a2a.tasks import InputWaitEnded
from mur.errors import MurError
from mur.manifest.capsule import Lifecycle
from mur.testing.a2a_harness import Gate, message

SLEEP_QUEUE = {"task_acceptance": "queue", "after_task": "sleep"}


# --- none -------------------------------------------------------------------------------------


def test_none_runs_task_md_then_exits_and_refuses_messages(make_service):
    gate = Gate()
    h = make_service(gate, initial_task="from task.md", task_acceptance="none")
    assert gate.started.wait(5)
    for method in ("message/send", "message/stream"):
        reply = h.rpc(method, {"message": message("hi")})
        assert reply["error"] == {"code": -32601, "message": "Method not found"}
    running = h.rpc("tasks/get", {})["result"]
    assert running["status"]["state"] == "working"  # tasks/get is still served
    gate.release.set()
    assert h.join() == "ok"
    (start,) = h.trace.of("task_start")
    assert start["source"] == "task_md" and start["message_parts_bytes"] == len("from task.md")
    assert h.trace.of("a2a_task_received") == []
    assert (h.workdir / "out" / "result.txt").read_text() == "done: from task.md"


def test_none_without_task_md_ends_at_once(make_service):
    gate = Gate()
    h = make_service(gate, task_acceptance="none")
    assert h.join(5) == "ok"
    assert gate.ran == []


# --- single -----------------------------------------------------------------------------------


def test_single_runs_one_task_rejects_the_rest_and_exits(make_service):
    gate = Gate()
    h = make_service(gate, task_acceptance="single")
    first = h.send("first")
    assert gate.started.wait(5)
    second = h.send("second")
    assert second["status"]["state"] == "rejected"
    assert second["status"]["message"]["parts"][0]["text"] == "task rejected: capsule is busy"
    assert h.get(second["id"])["status"]["state"] == "rejected"
    gate.release.set()
    assert h.join() == "ok"
    assert h.get(first["id"])["status"]["state"] == "completed"
    assert gate.ran == [first["id"]]
    assert h.send("after")["status"]["state"] == "rejected"  # the session is over


def test_single_failed_task_fails_the_session_and_writes_error(make_service):
    def boom(request, ctx):
        raise RuntimeError("the model fell over")

    h = make_service(boom, task_acceptance="single")
    task = h.send("x")
    assert h.join() == "failed"
    got = h.get(task["id"])
    assert got["status"]["state"] == "failed"
    assert got["status"]["message"]["parts"][0]["text"] == "RuntimeError: the model fell over"
    assert (h.workdir / "out" / "result.txt").read_text() == "error: RuntimeError: the model fell over"
    assert h.trace.of("task_end")[0]["exit_status"] == "failed"
    assert isinstance(h.service.last_error, RuntimeError)


def test_single_idle_timeout_runs_the_empty_task(make_service):
    seen = []

    def record(request, ctx):
        seen.append((request.text, request.source))
        return TaskOutcome("completed", "nothing to do")

    h = make_service(record, idle_timeout=0.3, task_acceptance="single")
    assert h.join(5) == "ok"
    assert seen == [("", "task_md")]


def test_single_with_task_md_runs_it_and_rejects_messages(make_service):
    gate = Gate()
    h = make_service(gate, initial_task="the file", task_acceptance="single")
    assert gate.started.wait(5)
    assert h.send("also me?")["status"]["state"] == "rejected"
    gate.release.set()
    assert h.join() == "ok"
    assert len(gate.ran) == 1


def test_single_with_after_task_sleep_still_exits(make_service):
    h = make_service(task_acceptance="single", after_task="sleep")
    h.send("one")
    assert h.join() == "ok"


# --- queue ------------------------------------------------------------------------------------


def test_queue_runs_serially_in_order_and_exits_when_idle(make_service):
    order, active, peak = [], [0], [0]
    lock = threading.Lock()

    def slow(request, ctx):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            order.append(request.text)
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return TaskOutcome("completed", request.text)

    h = make_service(slow, idle_timeout=1.0, queue_depth=10, **SLEEP_QUEUE)
    ids = [h.send(f"t{n}")["id"] for n in range(6)]
    for task_id in ids:
        assert h.wait(task_id)["status"]["state"] == "completed"
    assert order == [f"t{n}" for n in range(6)] and peak[0] == 1
    started = time.monotonic()
    assert h.join(10) == "ok"  # idle timeout -> clean exit
    assert time.monotonic() - started < 5


def test_queue_after_task_exit_ends_after_one_task_and_rejects_the_waiting(make_service):
    gate = Gate()
    h = make_service(gate, task_acceptance="queue", after_task="exit", queue_depth=3)
    first = h.send("first")
    assert gate.started.wait(5)
    waiting = [h.send(f"w{n}")["id"] for n in range(3)]
    gate.release.set()
    assert h.join() == "ok"
    assert h.get(first["id"])["status"]["state"] == "completed"
    for task_id in waiting:
        got = h.get(task_id)
        assert got["status"]["state"] == "rejected"
        assert got["status"]["message"]["parts"][0]["text"] == "task rejected: the session ended before this task started"
    assert gate.ran == [first["id"]]


def test_queue_depth_rejections_are_exact(make_service):
    gate = Gate()
    h = make_service(gate, queue_depth=2, **SLEEP_QUEUE)
    running = h.send("running")
    assert gate.started.wait(5)
    states = [h.send(f"n{n}")["status"]["state"] for n in range(5)]
    assert states == ["submitted", "submitted", "rejected", "rejected", "rejected"]
    gate.release.set()
    assert h.wait(running["id"])["status"]["state"] == "completed"


def test_queue_runs_task_md_first_and_deletes_it(make_service, tmp_path):
    workdir = tmp_path / "session"
    workdir.mkdir()
    (workdir / "task.md").write_text("initial")
    seen = []

    def record(request, ctx):
        seen.append((request.source, request.text, (workdir / "task.md").read_text()))
        return TaskOutcome("completed", "ok")

    h = make_service(record, initial_task="initial", idle_timeout=0.5, **SLEEP_QUEUE)
    h.wait(h.send("over a2a")["id"])
    assert h.join() == "ok"
    # task.md holds each task's text while it runs (written before an A2A task), and is gone after.
    assert seen == [("task_md", "initial", "initial"), ("a2a", "over a2a", "over a2a")]
    assert not (workdir / "task.md").exists()


def test_the_task_files_directories_are_held_yet_follow_a_removal(make_service, tmp_path):
    """The service holds out/ and the tools' workdir open between tasks (no walk per task), yet a
    removed out/ is made again, a link a tool put in place of task.md is replaced (never written
    through), and both directories are let go when the lifecycle ends."""
    import os
    import shutil

    workdir = tmp_path / "session"
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    seen = []

    def record(request, ctx):
        seen.append((workdir / "task.md").read_text())
        if request.text == "first":  # the tool's turn: task.md becomes a link to a file outside
            (workdir / "task.md").unlink()
            (workdir / "task.md").symlink_to(outside)
        return TaskOutcome("completed", f"done: {request.text}")

    def held() -> set[str]:
        return {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if fd.isdigit()
                and os.path.exists(f"/proc/self/fd/{fd}")}

    h = make_service(record, idle_timeout=0.5, **SLEEP_QUEUE)
    assert h.wait(h.send("first")["id"])["status"]["state"] == "completed"
    assert str(workdir / "out") in held()
    shutil.rmtree(workdir / "out")
    (workdir / "task.md").unlink(missing_ok=True)
    (workdir / "task.md").symlink_to(outside)  # left for the next task's write
    assert h.wait(h.send("second")["id"])["status"]["state"] == "completed"
    assert (workdir / "out" / "result.txt").read_text() == "done: second"
    assert seen == ["first", "second"] and outside.read_text() == "not yours"
    assert not (workdir / "task.md").exists()
    assert h.join() == "ok"
    assert not {str(workdir), str(workdir / "out")} & held()


def test_single_keeps_task_md(make_service, tmp_path):
    h = make_service(task_acceptance="single")
    h.send("keep me")
    h.join()
    assert (tmp_path / "session" / "task.md").read_text() == "keep me"


def test_a_failing_task_does_not_stop_a_queue(make_service):
    def flaky(request, ctx):
        if request.text == "bad":
            raise MurError("E-RUN-007", "agent loop failed: tool exploded")
        return TaskOutcome("completed", request.text)

    h = make_service(flaky, **SLEEP_QUEUE, queue_depth=5)
    bad, good = h.send("bad"), h.send("good")
    assert h.wait(bad["id"])["status"]["message"]["parts"][0]["text"] == "agent loop failed: tool exploded"
    assert h.wait(good["id"])["status"]["state"] == "completed"
    assert h.running


def test_idle_timeout_from_the_environment(make_service, monkeypatch):
    monkeypatch.setenv("MURMUR_A2A_TIMEOUT_SECS", "0.3")
    h = make_service(idle_timeout=None, **SLEEP_QUEUE)
    assert h.join(5) == "ok"


# --- request-input ----------------------------------------------------------------------------


def asks(request, ctx):
    reply = ctx.request_input("which branch?")
    return TaskOutcome("completed", f"using {reply}")


def test_request_input_round_trip(make_service):
    h = make_service(asks, **SLEEP_QUEUE)
    task = h.send("deploy")
    waiting = h.wait(task["id"], states=("input-required",))
    assert waiting["artifacts"] == [
        {"artifactId": "prompt", "name": "prompt", "parts": [{"kind": "text", "text": "which branch?"}]}
    ]
    reply = h.send("main")
    assert reply["id"] == task["id"] and reply["status"]["state"] == "working"
    done = h.wait(task["id"])
    assert done["artifacts"][0]["parts"][0]["text"] == "using main"
    assert h.service.registry.counts() == {"completed": 1}  # the reply did not become a task


def test_request_input_timeout_fails_the_task(make_service):
    h = make_service(asks, input_timeout_secs=1, **SLEEP_QUEUE)
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": message("deploy")}}
    with h.http.stream("POST", "/", json=body, timeout=10) as response:
        text = "".join(response.iter_text())
    frames = [json.loads(block.split("data: ", 1)[1]) for block in text.split("\n\n") if block]
    states = [f["status"]["state"] for f in frames]
    assert states == ["working", "input-required", "failed"]
    assert frames[1]["status"]["message"] == "which branch?" and frames[1]["final"] is False
    assert frames[-1]["final"] is True and frames[-1]["status"]["message"] == "input-timeout"
    task_id = frames[-1]["id"]
    got = h.get(task_id)
    assert got["status"]["state"] == "failed"
    assert got["status"]["message"]["parts"][0]["text"] == "input-timeout"
    assert (h.workdir / "out" / "result.txt").read_text() == "error: input-timeout"


def test_input_timeout_wins_even_if_the_executor_carries_on(make_service):
    def stubborn(request, ctx):
        try:
            ctx.request_input("anyone?")
        except InputWaitEnded:
            pass
        return TaskOutcome("completed", "pretended all was fine")

    h = make_service(stubborn, input_timeout_secs=1, **SLEEP_QUEUE)
    done = h.wait(h.send("x")["id"])
    assert done["status"]["state"] == "failed"
    assert done["status"]["message"]["parts"][0]["text"] == "input-timeout"


# --- threaded conversations -------------------------------------------------------------------


def remembering(request, ctx):
    history = list(request.history or [])
    if request.text == "fail":
        return TaskOutcome("failed", "nope", history=history + [{"role": "user", "content": "fail"}])
    history += [{"role": "user", "content": request.text}, {"role": "assistant", "content": f"#{len(history) // 2}"}]
    return TaskOutcome("completed", f"turn {len(history) // 2}", history=history)


def test_threaded_history_and_per_task_results(make_service):
    h = make_service(remembering, conversation="threaded", queue_depth=4, **SLEEP_QUEUE)
    ctx = "ctx_thread1"
    one = h.wait(h.send("hello", ctx)["id"])
    two = h.wait(h.send("again", ctx)["id"])
    other = h.wait(h.send("elsewhere")["id"])
    assert [t["artifacts"][0]["parts"][0]["text"] for t in (one, two, other)] == ["turn 1", "turn 2", "turn 1"]
    history = json.loads((h.workdir / "contexts" / ctx / "history.json").read_text())
    assert [m["content"] for m in history] == ["hello", "#0", "again", "#1"]
    failed = h.wait(h.send("fail", ctx)["id"])
    assert failed["status"]["state"] == "failed"
    assert json.loads((h.workdir / "contexts" / ctx / "history.json").read_text()) == history  # kept
    out = h.workdir / "out"
    assert (out / f"result_{one['id']}.txt").read_text() == "turn 1"
    assert (out / f"result_{two['id']}.txt").read_text() == "turn 2"
    assert (out / f"result_{failed['id']}.txt").read_text() == "error: nope"
    assert (out / "result.txt").read_text() == "error: nope"


def test_stateless_writes_no_history_and_no_per_task_results(make_service):
    h = make_service(remembering, **SLEEP_QUEUE)
    h.wait(h.send("hello", "ctx_a")["id"])
    assert not (h.workdir / "contexts").exists()
    assert sorted(p.name for p in (h.workdir / "out").iterdir()) == ["result.txt"]


# --- trace ------------------------------------------------------------------------------------


def test_trace_events(make_service):
    def counted(request, ctx):
        return TaskOutcome("completed", "x", stats={"turns": 3, "input_tokens": 10, "output_tokens": 4, "tool_calls": 2})

    h = make_service(counted, **SLEEP_QUEUE)
    task = h.send("héllo", "ctx_t")
    second = h.http.post(
        "/", json={"jsonrpc": "2.0", "id": 2, "method": "message/send", "params": {"message": message("tp")}},
        headers={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    ).json()["result"]
    h.wait(task["id"])
    h.wait(second["id"])  # both ran before the shutdown (else the second could end rejected, untraced)
    h.service.shutdown()
    h.join()
    kinds = [e["event_type"] for e in h.trace.events]
    assert kinds[:3] == ["a2a_task_received", "task_start", "task_end"]
    received, start, end = h.trace.events[:3]
    assert received == {
        "event_type": "a2a_task_received",
        "task_id": task["id"],
        "context_id": "ctx_t",
        "message_id": received["message_id"],
        "traceparent_from_caller": None,
    }
    assert start == {
        "event_type": "task_start",
        "task_id": task["id"],
        "context_id": "ctx_t",
        "source": "a2a",
        "message_parts_bytes": len("héllo".encode()),
    }
    assert end["exit_status"] == "ok" and end["duration_ms"] >= 0
    assert {k: end[k] for k in ("turns", "input_tokens", "output_tokens", "tool_calls", "shell_calls", "reopen_count")} == {
        "turns": 3, "input_tokens": 10, "output_tokens": 4, "tool_calls": 2, "shell_calls": 0, "reopen_count": 0,
    }
    assert h.trace.of("a2a_task_received")[1]["traceparent_from_caller"].startswith("00-0af7651916cd43dd")


# --- binding ----------------------------------------------------------------------------------


def test_taken_internal_port_is_e_run_010(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    service = CapsuleService(
        card={"name": "x", "version": "1"}, lifecycle=Lifecycle(), executor=lambda r, c: None,
        trace=lambda e: None, workdir=tmp_path, port=port,
    )
    try:
        with pytest.raises(MurError) as caught:
            service.start()
        assert caught.value.code == "E-RUN-010"
        assert caught.value.message == f"internal_port {port} is already bound"
        assert caught.value.hint
    finally:
        holder.close()


def test_free_internal_port_is_used(tmp_path):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    service = CapsuleService(
        card={"name": "x", "version": "1"}, lifecycle=Lifecycle(), executor=lambda r, c: None,
        trace=lambda e: None, workdir=tmp_path, port=port,
    )
    try:
        assert service.start() == f"localhost:{port}"
    finally:
        service.stop()


def test_a_failing_trace_write_ends_the_session_but_not_silently(make_service):
    def broken_trace(event):
        if event["event_type"] == "task_end":
            raise MurError("E-RUN-007", "agent loop failed: cannot write trace.jsonl")

    h = make_service(**SLEEP_QUEUE)
    h.service._trace = broken_trace
    task = h.send("x")
    with pytest.raises(MurError) as caught:
        h.join()
    assert caught.value.code == "E-RUN-007"
    got = h.get(task["id"])  # the door still answers, and the task did not vanish
    assert got["status"]["state"] == "failed"
    assert got["status"]["message"]["parts"][0]["text"] == "the session failed while running this task"


# --- tasks/cancel ------------------------------------------------------------------------------


def test_cancel_a_queued_task_drops_it_and_closes_its_stream(make_service):
    gate = Gate()
    h = make_service(gate, queue_depth=5, **SLEEP_QUEUE)
    running = h.send("running")
    assert gate.started.wait(5)
    queued = h.send("queued")["id"]
    later = h.send("later")["id"]
    # a watcher sees the canceled task's final frame
    frames: list[dict] = []

    def watch():
        body = {"jsonrpc": "2.0", "id": 9, "method": "stream/watch", "params": {}}
        with h.http.stream("POST", "/", json=body, timeout=15) as response:
            for block in response.iter_text():
                for part in block.split("\n\n"):
                    if "event: status" in part:
                        frames.append(json.loads(part.split("data: ", 1)[1]))
                if any(f["id"] == queued and f["final"] for f in frames):
                    return

    watcher = threading.Thread(target=watch)
    watcher.start()
    time.sleep(0.3)
    answer = h.rpc("tasks/cancel", {"id": queued})
    assert answer["result"]["status"]["state"] == "canceled"
    assert answer["result"]["status"]["message"]["parts"][0]["text"] == "task canceled by the client"
    watcher.join(10)
    assert any(f["id"] == queued and f["status"]["state"] == "canceled" and f["final"] for f in frames)
    # a second cancel, and a cancel of the running task, are -32002; an unknown id -32001
    assert h.rpc("tasks/cancel", {"id": queued})["error"]["code"] == -32002
    assert h.rpc("tasks/cancel", {"id": running["id"]})["error"]["code"] == -32002
    assert h.rpc("tasks/cancel", {"id": "tsk_nope"})["error"]["code"] == -32001
    assert h.rpc("tasks/cancel", {"id": 7})["error"]["code"] == -32602
    # `mur cancel`'s client says what each refusal means
    from mur.a2a.client import A2AClient

    with A2AClient(h.base) as client:
        for task_id, words in ((queued, "the task has already ended"), ("tsk_nope", "use a task id `mur send` printed")):
            with pytest.raises(MurError) as info:
                client.cancel_task(task_id)
            assert info.value.code == "E-A2A-001" and "tasks/cancel failed: -3200" in info.value.message
            assert info.value.hint and words in info.value.hint
    gate.release.set()
    assert h.wait(running["id"])["status"]["state"] == "completed"
    assert h.wait(later)["status"]["state"] == "completed"
    assert queued not in gate.ran  # the canceled task never ran
    assert h.get(queued)["status"]["state"] == "canceled"


def test_cancel_a_task_waiting_for_input_ends_it_canceled(make_service):
    h = make_service(asks, **SLEEP_QUEUE)
    task = h.send("deploy")
    h.wait(task["id"], states=("input-required",))
    answer = h.rpc("tasks/cancel", {"id": task["id"]})
    assert answer["result"]["status"]["state"] == "canceled"
    assert h.service.registry.wait_idle(5)  # the executor has returned and the outputs are written
    assert h.get(task["id"])["status"]["state"] == "canceled"
    assert (h.workdir / "out" / "result.txt").read_text() == "error: task canceled by the client"
    # the next message is a new task, not a late reply to the canceled one
    nxt = h.send("main")
    assert nxt["id"] != task["id"]


def stoppable(request, ctx):
    """An executor that works in steps and stops between them when asked (like the agent loop); only
    the task "long" takes long (200 steps), so a task queued behind it does not hold up the teardown."""
    for _ in range(200 if request.text == "long" else 1):
        reason = ctx.stop_reason()
        if reason:
            return TaskOutcome("failed", reason)
        time.sleep(0.05)
    return TaskOutcome("completed", "ran to the end")


def test_cancel_a_running_task_when_the_executor_can_stop(make_service):
    h = make_service(stoppable, service_kw={"cancel_running": True}, **SLEEP_QUEUE)
    task = h.send("long")
    h.wait(task["id"], states=("working",))
    answer = h.rpc("tasks/cancel", {"id": task["id"]})
    assert answer["result"]["status"]["state"] == "working"  # accepted; it stops at its next step
    assert h.rpc("tasks/cancel", {"id": task["id"]})["error"]["code"] == -32002  # already under way
    done = h.wait(task["id"])
    assert done["status"]["state"] == "canceled"
    assert done["status"]["message"]["parts"][0]["text"] == "task canceled by the client"
    assert h.send("next")["status"]["state"] == "submitted"  # the queue carries on


def test_a_running_task_is_not_cancelable_when_the_executor_cannot_stop(make_service):
    gate = Gate()
    h = make_service(gate, **SLEEP_QUEUE)  # cancel_running defaults to False (plain capsules)
    task = h.send("running")
    assert gate.started.wait(5)
    error = h.rpc("tasks/cancel", {"id": task["id"]})["error"]
    assert error["code"] == -32002 and "cannot stop midway" in error["message"]
    gate.release.set()
    assert h.wait(task["id"])["status"]["state"] == "completed"


def test_a_task_that_completes_before_it_sees_the_cancel_stays_completed(make_service):
    gate = Gate()
    h = make_service(gate, service_kw={"cancel_running": True}, **SLEEP_QUEUE)
    task = h.send("running")
    assert gate.started.wait(5)
    assert h.rpc("tasks/cancel", {"id": task["id"]})["result"]["status"]["state"] == "working"
    gate.release.set()  # the Gate executor never asks stop_reason(): it completes
    assert h.wait(task["id"])["status"]["state"] == "completed"


# --- configuration.blocking ---------------------------------------------------------------------


def test_a_blocking_send_answers_with_the_ended_task(make_service):
    h = make_service(**SLEEP_QUEUE, queue_depth=8)  # the two unblocked sends below may both wait
    blocking = {"message": message("now"), "configuration": {"blocking": True}}
    result = h.rpc("message/send", blocking)["result"]
    assert result["status"]["state"] == "completed"
    assert result["artifacts"][0]["parts"][0]["text"] == "echo: now"
    failed = make_service(lambda request, ctx: (_ for _ in ()).throw(RuntimeError("no")), **SLEEP_QUEUE)
    assert failed.rpc("message/send", blocking)["result"]["status"]["state"] == "failed"
    # without it (or with blocking false) the answer is the submitted task, as before
    assert h.rpc("message/send", {"message": message("later")})["result"]["status"]["state"] == "submitted"
    unblocked = {"message": message("later"), "configuration": {"blocking": False}}
    assert h.rpc("message/send", unblocked)["result"]["status"]["state"] == "submitted"


def test_a_blocking_send_waits_behind_the_queue_and_answers_input_required(make_service):
    gate = Gate()
    h = make_service(gate, **SLEEP_QUEUE)
    first = h.send("first")
    assert gate.started.wait(5)
    answers: list[dict] = []
    waiter = threading.Thread(target=lambda: answers.append(h.rpc(
        "message/send", {"message": message("second"), "configuration": {"blocking": True}})["result"]))
    waiter.start()
    time.sleep(0.3)
    assert answers == []  # queued behind the running task: no answer yet
    gate.release.set()
    waiter.join(10)
    assert answers[0]["status"]["state"] == "completed" and h.get(first["id"])["status"]["state"] == "completed"

    def ask(request, ctx):
        return TaskOutcome("completed", ctx.request_input("which one?"))

    asking = make_service(ask, **SLEEP_QUEUE)
    waiting = asking.rpc("message/send", {"message": message("go"), "configuration": {"blocking": True}})["result"]
    assert waiting["status"]["state"] == "input-required"  # it cannot end without the caller: answered now
    asking.send("this one")
    assert asking.wait(waiting["id"])["status"]["state"] == "completed"


def test_a_blocking_send_to_a_closing_session_is_answered_rejected(make_service):
    gate = Gate()
    h = make_service(gate, **SLEEP_QUEUE)
    h.send("running")
    assert gate.started.wait(5)
    answers: list[dict] = []
    waiter = threading.Thread(target=lambda: answers.append(h.rpc(
        "message/send", {"message": message("queued"), "configuration": {"blocking": True}})["result"]))
    waiter.start()
    time.sleep(0.3)
    h.service.shutdown()  # e.g. SIGTERM: waiting tasks are rejected
    waiter.join(10)
    gate.release.set()
    assert answers[0]["status"]["state"] == "rejected"


def test_a_wait_that_lasts_gives_memory_back_once_and_the_idle_timeout_still_ends_the_queue(make_service):
    """on_idle (the session's WasmEngine.let_go) runs once per long wait, between tasks only; a
    failure in it ends nothing; the idle timeout still counts from the start of the wait."""
    calls = []

    def let_go():
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("a saving that failed")

    began = time.monotonic()
    h = make_service(idle_timeout=1.5, task_acceptance="queue", after_task="sleep",
                     service_kw={"on_idle": let_go, "idle_let_go": 0.2})
    deadline = time.monotonic() + 5
    while not calls:
        assert time.monotonic() < deadline, "on_idle was never called"
        time.sleep(0.02)
    assert h.wait(h.send("after the first let-go")["id"])["status"]["state"] == "completed"
    assert h.join(10) == "ok"  # no task for 1.5 s after the last one: the queue ends as before
    assert len(calls) == 2  # once in the wait before the task, once in the wait after it
    assert calls[0] - began >= 0.2
