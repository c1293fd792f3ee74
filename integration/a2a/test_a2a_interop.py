"""A client that is not ours: the a2a-sdk Python client against our door.

The card declares a JSONRPC interface at protocol version 0.3.0, so a2a-sdk 1.x picks its A2A 0.3
compatibility transport, which speaks upstream's method names (message/send, tasks/get,
message/stream). See docs/a2a.md for what differs from the current A2A spec.

The SDK's client asks for a blocking message/send unless it is told to poll (`polling=True`: then
it sends `configuration.blocking: false`); the door honours both.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from mur.a2a.lifecycle import TaskOutcome
from mur.testing.a2a_harness import Gate

a2a_client = pytest.importorskip("a2a.client")
from a2a.client import ClientConfig, create_client  # noqa: E402
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text, new_text_message  # noqa: E402
from a2a.types import (  # noqa: E402
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)

QUEUE = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 4}


def working(request, ctx):
    ctx.emit("status", {"state": "working", "message": "inference turn 1"})
    ctx.emit("artifact", {"tool_name": "wc", "content": str(len(request.text))})
    time.sleep(0.05)
    return TaskOutcome("completed", f"echo: {request.text}")


async def _poll(client, task_id: str, until: set, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in until:
            return task
        assert time.monotonic() < deadline, f"task stuck in {task.status.state}"
        await asyncio.sleep(0.05)


def test_a2a_sdk_sends_and_polls(make_service):
    h = make_service(working, **QUEUE)

    async def go():
        client = await create_client(h.base, client_config=ClientConfig(streaming=False, polling=True))
        try:
            assert client._card.name == "echo"  # resolved from /.well-known/agent-card.json
            msg = new_text_message("hello from a2a-sdk", role=Role.ROLE_USER, context_id="ctx_sdk")
            events = [ev async for ev in client.send_message(SendMessageRequest(message=msg))]
            assert len(events) == 1 and events[0].HasField("task")
            submitted = events[0].task
            assert submitted.id.startswith("tsk_") and submitted.context_id == "ctx_sdk"
            assert submitted.status.state == TaskState.TASK_STATE_SUBMITTED
            done = await _poll(client, submitted.id, {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED})
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
            assert [get_artifact_text(a) for a in done.artifacts] == ["echo: hello from a2a-sdk"]
            assert get_message_text(done.status.message) == "task completed"
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="tsk_nope"))
        finally:
            await client.close()

    asyncio.run(go())


def test_a2a_sdk_default_send_blocks_until_the_task_ended(make_service):
    h = make_service(working, **QUEUE)

    async def go():
        client = await create_client(h.base, client_config=ClientConfig(streaming=False))  # blocking
        try:
            msg = new_text_message("wait for me", role=Role.ROLE_USER)
            events = [ev async for ev in client.send_message(SendMessageRequest(message=msg))]
            assert len(events) == 1 and events[0].task.status.state == TaskState.TASK_STATE_COMPLETED
            assert [get_artifact_text(a) for a in events[0].task.artifacts] == ["echo: wait for me"]
        finally:
            await client.close()

    asyncio.run(go())


def test_a2a_sdk_streams(make_service):
    h = make_service(working, **QUEUE)

    async def go():
        client = await create_client(h.base, client_config=ClientConfig(streaming=True))
        try:
            msg = new_text_message("stream me", role=Role.ROLE_USER)
            events = [ev async for ev in client.send_message(SendMessageRequest(message=msg))]
        finally:
            await client.close()
        kinds = [ev.WhichOneof("payload") for ev in events]
        assert kinds == ["status_update", "status_update", "artifact_update", "status_update"]
        final = events[-1].status_update
        assert final.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_message_text(final.status.message) == "echo: stream me"
        assert get_artifact_text(events[2].artifact_update.artifact) == str(len("stream me"))
        assert len({ev.status_update.task_id for ev in events if ev.HasField("status_update")}) == 1

    asyncio.run(go())


def test_a2a_sdk_sees_rejection_and_answers_input(make_service):
    gate = Gate()
    h = make_service(gate, task_acceptance="single")

    async def go():
        client = await create_client(h.base, client_config=ClientConfig(streaming=False, polling=True))
        try:
            first = [ev async for ev in client.send_message(SendMessageRequest(message=new_text_message("a", role=Role.ROLE_USER)))]
            assert gate.started.wait(5)
            second = [ev async for ev in client.send_message(SendMessageRequest(message=new_text_message("b", role=Role.ROLE_USER)))]
            assert second[0].task.status.state == TaskState.TASK_STATE_REJECTED
            assert get_message_text(second[0].task.status.message) == "task rejected: capsule is busy"
            gate.release.set()
            done = await _poll(client, first[0].task.id, {TaskState.TASK_STATE_COMPLETED})
            assert get_artifact_text(done.artifacts[0]) == "done: a"
        finally:
            await client.close()

    asyncio.run(go())


def test_a2a_sdk_replies_to_request_input(make_service):
    def asks(request, ctx):
        return TaskOutcome("completed", "picked " + ctx.request_input("which branch?"))

    h = make_service(asks, **QUEUE)

    async def go():
        client = await create_client(h.base, client_config=ClientConfig(streaming=False, polling=True))
        try:
            sent = [ev async for ev in client.send_message(SendMessageRequest(message=new_text_message("go", role=Role.ROLE_USER)))]
            task_id = sent[0].task.id
            waiting = await _poll(client, task_id, {TaskState.TASK_STATE_INPUT_REQUIRED})
            assert get_artifact_text(waiting.artifacts[0]) == "which branch?"
            reply = new_text_message("main", role=Role.ROLE_USER, task_id=task_id, context_id=waiting.context_id)
            answered = [ev async for ev in client.send_message(SendMessageRequest(message=reply))]
            assert answered[0].task.id == task_id
            done = await _poll(client, task_id, {TaskState.TASK_STATE_COMPLETED})
            assert get_artifact_text(done.artifacts[0]) == "picked main"
        finally:
            await client.close()

    asyncio.run(go())


def test_a2a_sdk_cancels_a_queued_task(make_service):
    gate = Gate()
    h = make_service(gate, **QUEUE)

    async def go():
        client = await create_client(h.base, client_config=ClientConfig(streaming=False, polling=True))
        try:
            async def send(text):
                msg = new_text_message(text, role=Role.ROLE_USER)
                return [ev async for ev in client.send_message(SendMessageRequest(message=msg))][0].task

            running = await send("running")
            assert await asyncio.to_thread(gate.started.wait, 5)
            queued = await send("queued")
            canceled = await client.cancel_task(CancelTaskRequest(id=queued.id))
            assert canceled.status.state == TaskState.TASK_STATE_CANCELED
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=running.id))
            gate.release.set()
            done = await _poll(client, running.id, {TaskState.TASK_STATE_COMPLETED})
            assert done.status.state == TaskState.TASK_STATE_COMPLETED
        finally:
            gate.release.set()
            await client.close()

    asyncio.run(go())
    assert len(gate.ran) == 1
