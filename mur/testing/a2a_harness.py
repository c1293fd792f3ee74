"""Run a CapsuleService on a background thread and talk to it: for tests and bench/.

``run()`` then executes off the main thread, so no SIGTERM handler is installed; tests of the
signal path run a real process (integration/a2a/test_a2a_sigterm.py).

Standalone, it serves the echo capsule (answers ``echo: <text>``) on 127.0.0.1 until SIGTERM or
Ctrl-C, to try A2A clients (`mur send`, `mur watch`, the a2a-sdk) without building a capsule; it
prints one JSON line ``{"url", "pid", "workdir"}``:

    python -m mur.testing.a2a_harness [--port N] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from mur.a2a.client import nodelay_transport
from mur.a2a.lifecycle import CapsuleService, TaskOutcome
from mur.a2a.tasks import TERMINAL

CARD = {
    "name": "echo",
    "version": "1.0.0",
    "capabilities": {"tools": [], "shell": False, "network": False, "streaming": True},
}


def echo(request, ctx):
    """The trivial executor: answers ``echo: <text>``."""
    return TaskOutcome("completed", f"echo: {request.text}", stats={"turns": 1})


class Gate:
    """An executor that blocks every task until ``release`` is set; records what it ran."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.lock = threading.Lock()
        self.ran: list[str] = []
        self.active = 0
        self.max_active = 0

    def __call__(self, request, ctx):
        with self.lock:
            self.ran.append(request.task_id)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self.started.set()
        try:
            if not self.release.wait(20):
                return TaskOutcome("failed", "gate never opened")
            return TaskOutcome("completed", f"done: {request.text}")
        finally:
            with self.lock:
                self.active -= 1


class TraceLog:
    """A thread-safe list of the trace events a service emitted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[dict] = []

    def __call__(self, event: dict) -> None:
        with self._lock:
            self.events.append(dict(event))

    def of(self, event_type: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event_type"] == event_type]


def message(text: str, context_id: str | None = None) -> dict:
    """An A2A ``message`` param in upstream's part shape."""
    msg: dict[str, Any] = {"messageId": f"msg_{uuid.uuid4().hex}", "role": "user", "parts": [{"text": text}]}
    if context_id:
        msg["contextId"] = context_id
    return msg


class ServiceHarness:
    """``with ServiceHarness(service) as h:`` starts it, runs its lifecycle on a thread, stops it."""

    def __init__(self, service: CapsuleService, initial_task: str | None = None):
        self.service = service
        self.initial_task = initial_task
        self.status: str | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mur-a2a-lifecycle", daemon=True)
        self.url = ""
        self.http: httpx.Client | None = None

    def _run(self) -> None:
        try:
            self.status = self.service.run(self.initial_task)
        except BaseException as exc:  # noqa: BLE001 - surfaced to the test
            self.error = exc

    def __enter__(self) -> "ServiceHarness":
        self.url = self.service.start()
        self.http = httpx.Client(base_url=self.base, timeout=30.0, transport=nodelay_transport())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.service.shutdown()
        self._thread.join(15)
        self.service.stop()
        if self.http is not None:
            self.http.close()

    @property
    def base(self) -> str:
        return f"http://{self.url}"

    def join(self, timeout: float = 15.0) -> str | None:
        """Wait for ``run()`` to return; returns its status."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the lifecycle loop did not end")
        if self.error is not None:
            raise self.error
        return self.status

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def rpc(self, method: str, params: dict | None = None, request_id: Any = 1, headers: dict | None = None) -> dict:
        """One JSON-RPC call; returns the whole response envelope."""
        body = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            body["params"] = params
        response = self.http.post("/", json=body, headers=headers or {})
        response.raise_for_status()
        return response.json()

    def send(self, text: str, context_id: str | None = None) -> dict:
        """``message/send``; returns the result (the task)."""
        return self.rpc("message/send", {"message": message(text, context_id)})["result"]

    def get(self, task_id: str) -> dict:
        """``tasks/get``; returns the result."""
        return self.rpc("tasks/get", {"id": task_id})["result"]

    def wait(self, task_id: str, states=TERMINAL, timeout: float = 15.0) -> dict:
        """Poll tasks/get until the task's state is in ``states``."""
        deadline = time.monotonic() + timeout
        while True:
            task = self.get(task_id)
            if task["status"]["state"] in states:
                return task
            if time.monotonic() > deadline:
                raise TimeoutError(f"task {task_id} still {task['status']['state']}")
            time.sleep(0.02)


class HarnessFactory:
    """Builds started harnesses over one session workdir; ``close()`` stops them all (a fixture)."""

    def __init__(self, workdir) -> None:
        self.workdir = workdir
        self._made: list[ServiceHarness] = []

    def __call__(self, executor=echo, *, initial_task=None, idle_timeout=10.0, service_kw=None, **lifecycle):
        from mur.manifest.capsule import Lifecycle

        trace = TraceLog()
        service = CapsuleService(
            card=CARD,
            lifecycle=Lifecycle(**lifecycle),
            executor=executor,
            trace=trace,
            workdir=self.workdir,
            idle_timeout=idle_timeout,
            **(service_kw or {}),
        )
        harness = ServiceHarness(service, initial_task)
        harness.trace = trace
        harness.workdir = self.workdir
        self._made.append(harness)
        return harness.__enter__()

    def close(self) -> None:
        for harness in self._made:
            harness.__exit__(None, None, None)


def main(argv: list[str] | None = None) -> int:
    """Serve the echo capsule in queue mode until SIGTERM / Ctrl-C."""
    from mur.errors import MurError
    from mur.manifest.capsule import Lifecycle

    parser = argparse.ArgumentParser(prog="python -m mur.testing.a2a_harness",
                                     description="Serve the echo capsule over A2A on 127.0.0.1 (a test tool).")
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: a free one)")
    parser.add_argument("--workdir", type=Path, default=None, help="session workdir (default: a new temp dir)")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="mur-a2a-echo-"))
    service = CapsuleService(card=CARD, lifecycle=Lifecycle(task_acceptance="queue", after_task="sleep"),
                             executor=echo, trace=lambda event: None, workdir=workdir, port=args.port,
                             idle_timeout=24 * 3600.0)
    try:
        url = service.start()
    except MurError as err:
        print(err.render(), file=sys.stderr)
        return 1
    print(json.dumps({"url": f"http://{url}", "pid": os.getpid(), "workdir": str(workdir)}), flush=True)
    try:
        service.run()
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
