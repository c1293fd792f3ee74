"""Tasks per second through a queue capsule on loopback, with a trivial executor.

The capsule runs in its own process, as under `mur run` (queue, after_task sleep, queue_depth N,
an executor that returns at once); this process is the client. One run, three figures:

* pipelined: N message/send calls from 16 concurrent HTTP clients into a queue deep enough to
  hold them all, timed until stream/watch has shown every task's final status;
* round trip: tasks run one after another through message/stream (send, then wait for the end);
* the bare executor called in a loop, as the ceiling the service overhead is measured against;
* the door's strict request parser against a bare json.loads (what refusing hostile input costs).

usage: python bench/a2a_queue.py [N]
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from mur.testing.a2a_harness import echo, message

CONCURRENCY = 16


def _watch_finals(base: str, expected: int, done: threading.Event, ready: threading.Event) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}
    seen = 0
    with httpx.stream("POST", base + "/", json=body, timeout=httpx.Timeout(10, read=None)) as response:
        for line in response.iter_lines():
            ready.set()
            if line.startswith("data: ") and '"final":true' in line and '"status"' in line:
                seen += 1
                if seen >= expected:
                    done.set()
                    return


async def _send_all(base: str, n: int) -> int:
    sem = asyncio.Semaphore(CONCURRENCY)
    limits = httpx.Limits(max_connections=CONCURRENCY)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:

        async def one(i: int) -> str:
            async with sem:
                body = {"jsonrpc": "2.0", "id": i, "method": "message/send", "params": {"message": message(f"t{i}")}}
                reply = (await client.post("/", json=body)).json()
                return reply["result"]["status"]["state"]

        states = await asyncio.gather(*(one(i) for i in range(n)))
    return sum(state == "submitted" for state in states)


def pipelined(base: str, n: int) -> float:
    done, ready = threading.Event(), threading.Event()
    watcher = threading.Thread(target=_watch_finals, args=(base, n, done, ready), daemon=True)
    watcher.start()
    ready.wait(10)
    started = time.perf_counter()
    accepted = asyncio.run(_send_all(base, n))
    assert accepted == n, f"only {accepted} of {n} accepted"
    assert done.wait(300), "not every task finished"
    return n / (time.perf_counter() - started)


def round_trip(base: str, n: int) -> float:
    started = time.perf_counter()
    with httpx.Client(base_url=base, timeout=60) as http:
        for i in range(n):
            body = {"jsonrpc": "2.0", "id": i, "method": "message/stream", "params": {"message": message(f"r{i}")}}
            with http.stream("POST", "/", json=body) as response:
                text = "".join(response.iter_text())
            assert '"state":"completed"' in text
    return n / (time.perf_counter() - started)


def serve(workdir: str, depth: int) -> None:
    """The capsule process: serve until stdin closes."""
    from mur.a2a.lifecycle import CapsuleService
    from mur.testing.a2a_harness import CARD
    from mur.manifest.capsule import Lifecycle

    service = CapsuleService(
        card=CARD,
        lifecycle=Lifecycle(task_acceptance="queue", after_task="sleep", queue_depth=depth),
        executor=echo,
        trace=lambda event: None,
        workdir=Path(workdir),
        idle_timeout=0,
    )
    print(json.dumps({"url": service.start()}), flush=True)
    threading.Thread(target=lambda: (sys.stdin.read(), service.shutdown()), daemon=True).start()
    service.run()
    service.stop()


def bare(n: int) -> float:
    class Request:
        text = "x"

    started = time.perf_counter()
    for _ in range(n):
        echo(Request, None)
    return n / (time.perf_counter() - started)


def parsing(n: int) -> tuple[float, float]:
    """Requests per second through the door's strict parser (protocol.parse_request: duplicate
    keys, ids, non-finite numbers, surrogates) and through a bare json.loads, on one message/send."""
    from mur.a2a.protocol import parse_request

    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": {"message": message("x" * 200)}}).encode()
    rates = []
    for parse in (parse_request, json.loads):
        started = time.perf_counter()
        for _ in range(n):
            parse(body)
        rates.append(n / (time.perf_counter() - started))
    return rates[0], rates[1]


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], int(sys.argv[3]))
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as tmp:
        capsule = subprocess.Popen(
            [sys.executable, __file__, "--serve", tmp, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            base = "http://" + json.loads(capsule.stdout.readline())["url"]
            piped = pipelined(base, n)
            rt = round_trip(base, max(n // 10, 50))
        finally:
            capsule.stdin.close()
            capsule.wait(30)
    ceiling = bare(n * 10)
    strict, loads = parsing(n * 10)
    print(f"a2a queue capsule (own process), trivial executor, loopback, {CONCURRENCY} concurrent clients")
    print(f"  pipelined message/send: {piped:8.0f} tasks/s  ({n} tasks)")
    print(f"  round trip (message/stream, one at a time): {rt:8.0f} tasks/s")
    print(f"  bare executor call: {ceiling:8.0f} calls/s")
    print(f"  ratio pipelined / round trip: {piped / rt:.2f}x; wall time per pipelined task: {1e6 / piped:.0f} us")
    print(f"  strict request parsing: {strict:8.0f}/s vs bare json.loads {loads:8.0f}/s ({loads / strict:.1f}x the cost,"
          f" {1e6 / strict - 1e6 / loads:.0f} us per request)")


if __name__ == "__main__":
    main()
