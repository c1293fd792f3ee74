"""A2A `message/send` throughput: mur's door against a2a-sdk's own server, the same trivial executor.

    python bench/a2a_vs_sdk.py [--clients 32] [--seconds 5] [--json]

Each server runs in its own process on 127.0.0.1 and executes the same trivial work for every task
(answer `echo: <text>`):

* mur: mur.a2a.lifecycle.CapsuleService as `mur run` serves a deployed capsule (queue + sleep, the
  real door: auth checks, JSON-RPC, the task registry, trace and result files), its executor
  returning the answer;
* a2a-sdk: its JSON-RPC route and agent card on Starlette under uvicorn (the SDK's documented
  server), DefaultRequestHandler with an in-memory task store, an AgentExecutor completing the task
  with the answer; its v0.3 compatibility switch on, so both take the same request.

`--clients` clients (asyncio, one keep-alive connection each) send `message/send` with
`configuration.blocking: true` back to back: each answer is the ended task (the SDK's default; mur
answers so when asked), checked `completed`. Counted over `--seconds` after a one-second warm-up;
both servers are measured in the same run, alternating for `--rounds` rounds (medians compared), with
the machine's load printed.
The client runs on the same machine: its CPU is part of the figure for both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

SERVERS = ("mur", "a2a-sdk")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the servers ------------------------------------------------------------------------------


def serve_mur(port: int) -> None:
    from mur.a2a.lifecycle import CapsuleService, TaskOutcome
    from mur.manifest.capsule import Lifecycle

    def echo(request, context):
        return TaskOutcome("completed", f"echo: {request.text}")

    with tempfile.TemporaryDirectory() as work:
        lifecycle = Lifecycle(task_acceptance="queue", after_task="sleep", queue_depth=10_000)
        service = CapsuleService(card={"name": "bench", "version": "1.0.0", "capabilities": {}}, lifecycle=lifecycle,
                                 executor=echo, trace=lambda event: None, workdir=work, port=port, idle_timeout=0)
        service.start()
        try:
            service.run(None)
        finally:
            service.stop()


def serve_sdk(port: int) -> None:
    import uvicorn
    from a2a.helpers.proto_helpers import new_task, new_text_message
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState
    from starlette.applications import Starlette

    class Echo(AgentExecutor):
        async def execute(self, context, event_queue) -> None:
            if context.current_task is None:
                await event_queue.enqueue_event(new_task(context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED))
            text = " ".join(p.text for p in context.message.parts)
            updater = TaskUpdater(event_queue, context.task_id, context.context_id)
            await updater.complete(new_text_message(f"echo: {text}"))

        async def cancel(self, context, event_queue) -> None:
            raise NotImplementedError

    card = AgentCard(name="bench", description="bench", version="1.0.0", capabilities=AgentCapabilities(),
                     default_input_modes=["text"], default_output_modes=["text"],
                     skills=[AgentSkill(id="echo", name="echo", description="echoes the task", tags=["echo"])],
                     supported_interfaces=[AgentInterface(url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC",
                                                          protocol_version="0.3")])
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


# --- the client -------------------------------------------------------------------------------


def request_bytes(client: int, n: int) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": n, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": f"m-{client}-{n}", "role": "user",
                    "parts": [{"kind": "text", "text": f"task {n}"}]},
        "configuration": {"blocking": True}}}).encode()
    head = (f"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode()
    return head + body


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"unexpected answer: {head[:80]!r}")
    return await reader.readexactly(length)


async def one_client(port: int, client: int, stop_at: float, count_from: float, done: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    n = 0
    try:
        while time.monotonic() < stop_at:
            n += 1
            writer.write(request_bytes(client, n))
            body = await read_response(reader)
            if b'"completed"' not in body:
                raise RuntimeError(f"task did not complete: {body[:200]!r}")
            if time.monotonic() >= count_from:
                done[client] += 1
    finally:
        writer.close()


async def load(port: int, clients: int, seconds: float) -> float:
    start = time.monotonic()
    count_from, stop_at = start + 1.0, start + 1.0 + seconds
    done = [0] * clients
    await asyncio.gather(*(one_client(port, i, stop_at, count_from, done) for i in range(clients)))
    return sum(done) / seconds


def wait_up(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the server exited ({proc.returncode})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    sys.exit("the server did not answer")


def measure(server: str, clients: int, seconds: float) -> dict:
    port = free_port()
    env = {**os.environ, "MURMUR_A2A_MAX_CONNECTIONS": str(max(256, clients * 2))}
    proc = subprocess.Popen([sys.executable, __file__, "--serve", server, str(port)], env=env,
                            stdout=subprocess.DEVNULL)
    try:
        wait_up(port, proc)
        rate = asyncio.run(load(port, clients, seconds))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"server": server, "tasks_per_s": round(rate, 1), "load": [round(x, 2) for x in os.getloadavg()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="measurements per server, alternating (default 3)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=2, metavar=("SERVER", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        (serve_mur if args.serve[0] == "mur" else serve_sdk)(int(args.serve[1]))
        return 0
    runs = [measure(server, args.clients, args.seconds) for _ in range(args.rounds) for server in SERVERS]
    rates = {server: sorted(r["tasks_per_s"] for r in runs if r["server"] == server) for server in SERVERS}
    medians = {server: statistics.median(v) for server, v in rates.items()}
    ratio = medians["mur"] / medians["a2a-sdk"] if medians["a2a-sdk"] else float("inf")
    if args.json:
        print(json.dumps({"clients": args.clients, "seconds": args.seconds, "rounds": runs,
                          "median_tasks_per_s": medians, "mur_over_sdk": round(ratio, 2)}))
        return 0
    print(f"message/send (blocking), {args.clients} clients, {args.seconds:g} s each, {args.rounds} rounds "
          f"(servers alternating), {os.cpu_count()} CPUs")
    for r in runs:
        print(f"  {r['server']:<8} {r['tasks_per_s']:>9.1f} tasks/s   load {r['load']}")
    print(f"  median: mur {medians['mur']:.1f}, a2a-sdk {medians['a2a-sdk']:.1f} tasks/s; mur / a2a-sdk = {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
