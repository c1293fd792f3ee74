"""200 concurrent message/send calls against a queue capsule: nothing lost, exact rejections.

With a queue capsule, ``queue_depth`` bounds the tasks that wait (not yet started). The running
task does not count. So while one task runs and the executor is held, a burst of N sends gets
exactly ``queue_depth`` accepted and ``N - queue_depth`` rejected; once the executor is let go,
every accepted task runs exactly once, one at a time.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from mur.a2a.lifecycle import TaskOutcome
from mur.testing.a2a_harness import Gate, message

BURST = 200


async def _burst(base: str, texts: list[str]) -> list[dict]:
    limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:

        async def one(n: int, text: str) -> dict:
            body = {"jsonrpc": "2.0", "id": n, "method": "message/send", "params": {"message": message(text)}}
            response = await client.post("/", json=body)
            response.raise_for_status()
            reply = response.json()
            assert reply["id"] == n
            return reply["result"]

        return await asyncio.gather(*(one(n, text) for n, text in enumerate(texts)))


def test_burst_against_a_held_queue_rejects_exactly_beyond_the_depth(make_service):
    depth = 16
    gate = Gate()
    h = make_service(gate, task_acceptance="queue", after_task="sleep", queue_depth=depth)
    running = h.send("running")
    assert gate.started.wait(5)

    texts = [f"task-{n}" for n in range(BURST)]
    results = asyncio.run(_burst(h.base, texts))

    accepted = [r for r in results if r["status"]["state"] == "submitted"]
    rejected = [r for r in results if r["status"]["state"] == "rejected"]
    assert len(accepted) == depth
    assert len(rejected) == BURST - depth
    assert {r["status"]["message"]["parts"][0]["text"] for r in rejected} == {"task rejected: capsule is busy"}
    assert len({r["id"] for r in results} | {running["id"]}) == BURST + 1

    gate.release.set()
    text_of = {r["id"]: texts[i] for i, r in enumerate(results)}
    for task in accepted + [running]:
        done = h.wait(task["id"], timeout=30)
        assert done["status"]["state"] == "completed"
        expected = text_of.get(task["id"], "running")
        assert done["artifacts"][0]["parts"][0]["text"] == f"done: {expected}"
    for task in rejected:
        assert h.get(task["id"])["status"]["state"] == "rejected"

    assert gate.ran[0] == running["id"]
    assert sorted(gate.ran[1:]) == sorted(r["id"] for r in accepted)  # each accepted task ran once
    assert gate.max_active == 1
    assert h.service.registry.counts() == {"completed": depth + 1, "rejected": BURST - depth}
    assert len(h.trace.of("task_start")) == len(h.trace.of("task_end")) == depth + 1


def test_burst_against_a_busy_queue_loses_nothing(make_service):
    depth = 8
    ran: list[str] = []
    lock = threading.Lock()

    def quick(request, ctx):
        time.sleep(0.005)
        with lock:
            ran.append(request.task_id)
        return TaskOutcome("completed", request.text)

    h = make_service(quick, task_acceptance="queue", after_task="sleep", queue_depth=depth)
    results = asyncio.run(_burst(h.base, [f"q{n}" for n in range(BURST)]))
    accepted = [r["id"] for r in results if r["status"]["state"] == "submitted"]
    rejected = [r["id"] for r in results if r["status"]["state"] == "rejected"]
    assert len(accepted) + len(rejected) == BURST
    assert len(accepted) >= depth
    for task_id in accepted:
        assert h.wait(task_id, timeout=30)["status"]["state"] == "completed"
    assert sorted(ran) == sorted(accepted)
    assert not set(ran) & set(rejected)
    counts = h.service.registry.counts()
    assert counts == {k: v for k, v in {"completed": len(accepted), "rejected": len(rejected)}.items() if v}
