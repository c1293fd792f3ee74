"""A hostile client against a real `mur run` queue capsule (examples/hello on wasmtime) on loopback.

One capsule serves the whole module; each test is a storm (malformed JSON and HTTP, odd Unicode,
extreme numbers, notifications, slow and idle connections, floods beyond queue_depth, streams
that never read) followed by the same check: the agent card answers and a new task completes.
The last test checks what every storm left: each accepted task ended exactly once with its
answer, nothing a refused request carried ever ran, and SIGTERM exits 0 with nothing on stderr.

The door's limits are lowered through their environment variables so the slow-client storms
take about a second each (the defaults are the same code with larger numbers).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from mur.a2a.http1 import EVICT_AFTER
from mur.testing.a2a_harness import message

DEPTH = 4
LIMITS = {
    "MURMUR_A2A_HEAD_TIMEOUT_SECS": "3",
    "MURMUR_A2A_BODY_TIMEOUT_SECS": "1.5",
    "MURMUR_A2A_KEEP_ALIVE_SECS": "1",
    "MURMUR_A2A_MAX_CONNECTIONS": "32",
    "MURMUR_A2A_STALL_TIMEOUT_SECS": "2",
    "MURMUR_A2A_MAX_STREAMS": "8",
}
JSON = {"content-type": "application/json"}


class Capsule:
    """The `mur run` process, and the record of every task it accepted with the answer it owes."""

    def __init__(self, directory: Path, home: Path):
        env = {**os.environ, **LIMITS, "HOME": str(home), "MURMUR_A2A_TIMEOUT_SECS": "0",
               "MUR_CACHE_DIR": str(Path.home() / ".murmur" / "cache")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mur", "run", "--json", "--lifecycle-task-acceptance", "queue",
             "--lifecycle-after-task", "sleep"],
            cwd=directory, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()
        startup = json.loads(line)
        self.workdir = Path(startup["workdir"])
        self.port = int(startup["url"].rsplit(":", 1)[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.base, timeout=30)
        self.accepted: dict[str, str] = {}  # task id -> the answer it owes
        self.failed: dict[str, str] = {}  # tasks made to fail on purpose: answer -> task id
        self._lock = threading.Lock()

    def post(self, body: bytes | str, headers: dict | None = None) -> httpx.Response:
        content = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body
        return self.http.post("/", content=content, headers=headers or JSON)

    def send(self, text: str, client: httpx.Client | None = None, request_id: object = 1) -> dict:
        """message/send; an accepted task is recorded with the greeting it owes."""
        body = {"jsonrpc": "2.0", "id": request_id, "method": "message/send", "params": {"message": message(text)}}
        reply = (client or self.http).post("/", json=body).json()
        task = reply["result"]
        if task["status"]["state"] == "submitted":
            with self._lock:
                self.accepted[task["id"]] = f"Hello, {text.strip() or 'world'}!"
        return reply

    def get(self, task_id: str) -> dict:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
        return self.http.post("/", json=body).json()["result"]

    def wait(self, task_id: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            task = self.get(task_id)
            if task["status"]["state"] not in ("submitted", "working"):
                return task
            assert time.monotonic() < deadline, f"{task_id} still {task['status']['state']}"
            time.sleep(0.05)

    def healthy(self) -> None:
        """The storm is over: the card answers and a new task completes with its answer."""
        card = self.http.get("/.well-known/agent-card.json")
        assert card.status_code == 200 and card.json()["name"] == "hello"
        task = self.send("after the storm")["result"]
        done = self.wait(task["id"])
        assert answer(done) == "Hello, after the storm!"
        assert self.proc.poll() is None

    def raw(self, data: bytes, timeout: float = 5) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port)) as sock:
            sock.sendall(data)
            return read_until_closed(sock, timeout)


def answer(task: dict) -> str:
    assert task["status"]["state"] == "completed", task
    return task["artifacts"][0]["parts"][0]["text"].strip()


def read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (socket.timeout, ConnectionResetError):
        out += b"<open>"
    return out


@pytest.fixture(scope="module")
def capsule(hello, tmp_path_factory):
    directory = tmp_path_factory.mktemp("hostile") / "hello"
    shutil.copytree(hello, directory)
    manifest = directory / "murmur.yaml"
    manifest.write_text(manifest.read_text() + f"\nlifecycle:\n  queue_depth: {DEPTH}\n")
    home = tmp_path_factory.mktemp("home")
    c = Capsule(directory, home)
    yield c
    if c.proc.poll() is None:
        c.proc.kill()
        c.proc.wait()
    c.http.close()


def rpc(method: str = "message/send", **fields) -> dict:
    doc = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message("x")}}
    doc.update(fields)
    return doc


MALFORMED = [
    # (body, JSON-RPC error code)
    ("", -32700), ("{", -32700), ("nul\x00", -32700), ('{"a":1} {"b":2}', -32700), ("[" * 100_000, -32700),
    ('{"a":' * 50_000 + "1" + "}" * 50_000, -32700), ("\ufeff{}", -32700), (b"\xc3\x28", -32700), (b"\xed\xa0\x80", -32700),
    ("[]", -32600), (json.dumps([rpc(), rpc()]), -32600), ("null", -32600), ('"x"', -32600), ("12", -32600),
    ('{"jsonrpc":"2.0","id":1,"id":2,"method":"message/send","params":{}}', -32600),
    ('{"jsonrpc":"2.0","id":1,"method":"tasks/get","method":"message/send"}', -32600),
    (json.dumps({k: v for k, v in rpc().items() if k != "id"}), -32600),  # a notification
    (json.dumps(rpc(jsonrpc="1.0")), -32600), (json.dumps(rpc(jsonrpc=2.0)), -32600), (json.dumps(rpc(method=7)), -32600),
    (json.dumps(rpc(method=None)), -32600), (json.dumps(rpc(method="nope")), -32601), (json.dumps(rpc(params=[1])), -32602),
    (json.dumps(rpc(params="x")), -32602), (json.dumps(rpc(params={"message": []})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": []}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": [{"kind": "file", "file": {"uri": "file:///etc/passwd"}}]}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": [{"kind": "data", "data": {"a": 1}}]}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": [{"kind": "exe"}]}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": [{"kind": "text", "text": 5}]}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": {"text": "x"}}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": [None]}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "messageId": 5}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "messageId": ""}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "role": ["user"]}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "contextId": {"a": 1}}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "contextId": "../../etc"}})), -32602),
    (json.dumps(rpc(params={"message": {**message("x"), "contextId": "x" * 500}})), -32602),
    (json.dumps(rpc("tasks/get", params={"id": 5})), -32602), (json.dumps(rpc("tasks/cancel", params={"id": None})), -32602),
    (json.dumps(rpc("tasks/get", params={"id": "tsk_nope"})), -32001),
    (json.dumps(rpc(params={"message": {**message("x"), "parts": [{"text": "x" * 200_000}] * 6}})), -32600),  # 413
]


def test_malformed_json_and_json_rpc_is_refused_and_runs_nothing(capsule):
    for body, code in MALFORMED:
        response = capsule.post(body)
        doc = response.json()
        assert doc["error"]["code"] == code, (body[:80], doc)
        assert response.status_code == (413 if code == -32600 and len(body) > 1024 * 1024 else 200)
        assert "result" not in doc
    capsule.healthy()


GARBAGE = [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello on the plain port
    b"GARBAGE\r\n\r\n",
    b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ncontent-length: 9\r\n\r\n{}{}",
    b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1e3\r\n\r\n",
    b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked, identity\r\n\r\n",
    b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
    b"POST / HTTP/1.1\r\nhost: x\r\nx: " + b"a" * 100_000,
    b"GET /\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n",
]


def test_http_garbage_and_smuggling_shapes_get_4xx_and_run_nothing(capsule):
    for data in GARBAGE:
        reply = capsule.raw(data)
        assert reply.startswith(b"HTTP/1.1 4"), (data[:60], reply[:120])
    # pipelined: three requests in one write are answered in order on the one connection
    body = lambda n: json.dumps(rpc("tasks/get", id=n, params={"id": f"tsk_{n}"})).encode()  # noqa: E731
    head = lambda b: b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(b)  # noqa: E731
    reply = capsule.raw(b"".join(head(body(n)) + body(n) for n in range(3)) + b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert [b'"id":%d,' % n in reply for n in range(3)] == [True] * 3 and reply.count(b"HTTP/1.1 200") == 4
    capsule.healthy()


ODD_TEXT = [
    "\U0001f600 emoji", "\u202eright-to-left override", "nul\x00inside", "e\u0301 combining", "\ufeffbom", "\uffff noncharacter",
    "\u4e2d\u6587", "tab\tand\nnewlines\r\n", "\\u0000 as text", '"quotes" and {braces}', "x" * 20_000, "\u2028line sep",
    "</script><script>alert(1)</script>", "%s%n%x", "$(rm -rf /)", "a" + "\u0300" * 500,
]


def test_odd_unicode_tasks_complete_with_their_answers_and_lone_surrogates_are_refused(capsule):
    sent = []
    for text in ODD_TEXT:
        while (reply := capsule.send(text))["result"]["status"]["state"] != "submitted":
            time.sleep(0.05)
        sent.append(reply["result"])
    for task in sent:
        assert answer(capsule.wait(task["id"])) == capsule.accepted[task["id"]]
    for field, value in [("text", "a\ud800b"), ("text", "\udfff"), ("messageId", "m\ud83d")]:
        msg = message("x")
        if field == "text":
            msg["parts"] = [{"kind": "text", "text": value}]
        else:
            msg[field] = value
        body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "message/send", "params": {"message": msg}})
        doc = capsule.post(body).json()
        assert doc["id"] == 3 and doc["error"]["code"] == -32602 and "lone UTF-16 surrogate" in doc["error"]["message"]
    capsule.healthy()


@pytest.mark.parametrize(
    "id_text",
    ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e300", "9007199254740992", "1" * 400, "0.5", "true",
     "false", "{}", '{"id":1}', "[]", "[1,2]", '"' + "i" * 300 + '"'],
)
def test_extreme_ids_are_refused_before_any_task_exists(capsule, id_text):
    body = '{"jsonrpc":"2.0","id":%s,"method":"message/send","params":{"message":%s}}' % (id_text, json.dumps(message("id")))
    response = capsule.post(body)
    assert response.status_code == 200
    text = response.text
    doc = json.loads(text, parse_constant=lambda name: pytest.fail(f"the answer holds {name}"))
    assert doc == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": doc["error"]["message"]}}
    assert doc["error"]["message"].startswith("Invalid Request: id must be")


def test_ids_at_the_edges_are_echoed_exactly(capsule):
    for request_id in [2**53 - 1, -(2**53 - 1), 0, "", "i" * 256, None]:
        reply = capsule.send("edge", request_id=request_id)
        assert reply["id"] == request_id and "result" in reply
        capsule.wait(reply["result"]["id"])
    capsule.healthy()


def test_slow_and_idle_connections_do_not_stop_the_door(capsule):
    def open_socket(data: bytes = b"") -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", capsule.port))
        if data:
            sock.sendall(data)
        return sock

    started = time.monotonic()
    partial_heads = [open_socket(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-") for _ in range(8)]
    partial_bodies = [
        open_socket(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{}")
        for _ in range(8)
    ]
    idle = [open_socket() for _ in range(60)]  # with the 16 above: past twice MURMUR_A2A_MAX_CONNECTIONS
    time.sleep(EVICT_AFTER + 0.2)  # old enough to be evicted for a newcomer
    for _ in range(3):
        capsule.healthy()
    for sock in partial_heads + partial_bodies + idle:  # each 408, evicted for a newcomer, or refused 503
        reply = read_until_closed(sock, timeout=6)
        assert reply == b"" or reply.startswith((b"HTTP/1.1 408", b"HTTP/1.1 503")), reply[:80]
        sock.close()
    assert time.monotonic() - started < 20
    capsule.healthy()


def test_a_flood_beyond_queue_depth_is_rejected_cleanly_and_the_accepted_all_finish(capsule):
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    with httpx.Client(base_url=capsule.base, timeout=60, limits=limits) as client, ThreadPoolExecutor(32) as pool:
        results = list(pool.map(lambda n: capsule.send(f"flood {n}", client=client)["result"], range(120)))
    states = [r["status"]["state"] for r in results]
    assert set(states) <= {"submitted", "rejected"} and states.count("submitted") >= DEPTH
    assert "rejected" in states
    for task in results:
        if task["status"]["state"] == "rejected":
            assert task["status"]["message"]["parts"][0]["text"] == "task rejected: capsule is busy"
        else:
            assert answer(capsule.wait(task["id"])) == capsule.accepted[task["id"]]
    capsule.healthy()


def test_stream_clients_that_never_read_or_drop_mid_stream_do_not_stop_the_door(capsule):
    muted = []
    for _ in range(4):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", capsule.port))
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}).encode()
        sock.sendall(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        muted.append(sock)
    # message/stream clients that hang up before their task's final frame
    for n in range(3):
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": message(f"dropped {n}")}}
        with capsule.http.stream("POST", "/", json=body) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    task_id = json.loads(line[6:])["id"]
                    break
        capsule.accepted[task_id] = f"Hello, dropped {n}!"
    for n in range(6):
        capsule.healthy()
    for sock in muted:
        sock.close()
    capsule.healthy()


def test_a_task_that_fails_inside_the_capsule_fails_alone_and_the_queue_goes_on(capsule):
    out = capsule.workdir / "out"
    shutil.rmtree(out)
    out.write_text("a file where out/ should be: neither the capsule nor mur can write the result")
    try:
        task = capsule.send("doomed")["result"]
        failed = capsule.wait(task["id"])
    finally:
        out.unlink()
        out.mkdir()
    assert failed["status"]["state"] == "failed"
    capsule.failed[capsule.accepted.pop(task["id"])] = task["id"]
    capsule.healthy()


def test_after_every_storm_each_accepted_task_ended_once_with_its_answer_and_sigterm_exits_0_quietly(capsule):
    assert capsule.accepted, "the storms accepted no task"
    for task_id, owed in capsule.accepted.items():
        assert answer(capsule.wait(task_id)) == owed
    capsule.proc.send_signal(signal.SIGTERM)
    assert capsule.proc.wait(30) == 0
    assert capsule.proc.stderr.read() == ""
    events = [json.loads(line) for line in (capsule.workdir / "trace.jsonl").read_text().splitlines()]
    started = [e["task_id"] for e in events if e["event_type"] == "task_start"]
    ends = [e for e in events if e["event_type"] == "task_end"]
    # What ran is exactly what was accepted (storms and healthy() probes): no refused request ran.
    failed = set(capsule.failed.values())
    assert sorted(started) == sorted([*capsule.accepted, *failed])
    assert sorted(e["task_id"] for e in ends) == sorted(started)  # each ended exactly once
    assert {e["task_id"] for e in ends if e["exit_status"] != "ok"} == failed
    assert all(e["error"] for e in ends if e["task_id"] in failed)  # the trace says why
