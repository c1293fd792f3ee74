"""The door against a hostile client, over real sockets on 127.0.0.1: slow and idle connections,
connection floods, streams that never read, HTTP framing tricks, and failures inside one task.

Limits are set small here (DoorLimits) so each storm takes about a second; the defaults are the
same code with larger numbers. integration/a2a/test_a2a_hostile.py runs storms against `mur run`.
"""

from __future__ import annotations

import json
import math
import socket
import time

import pytest

from mur.a2a.http1 import EVICT_AFTER
from mur.a2a.listen import DoorLimits
from mur.testing.a2a_harness import message
from mur.testing.sockets import read_all
from mur.a2a.lifecycle import TaskOutcome

QUEUE = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 4}
FAST = DoorLimits(max_connections=8, head_timeout=0.5, body_timeout=0.7, keep_alive=0.5, stall_timeout=0.5, max_streams=3)


def serve(make_service, executor=None, limits: DoorLimits = FAST, **kw):
    service_kw = {"limits": limits, **kw.pop("service_kw", {})}
    args = (executor,) if executor is not None else ()
    return make_service(*args, service_kw=service_kw, **{**QUEUE, **kw})


def connect(h) -> socket.socket:
    host, port = h.url.rsplit(":", 1)
    sock = socket.create_connection(("127.0.0.1", int(port)))
    sock.settimeout(5)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(65536) == b"" or closed_by_server(sock)
    except socket.timeout:
        return False
    except OSError:
        return True


def post(body: bytes, extra: str = "") -> bytes:
    return (
        f"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def rpc_body(method: str, params: dict | None = None, request_id=1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}).encode()


def open_watches(h, n: int) -> list[socket.socket]:
    """``n`` stream/watch connections, each past its response head."""
    streams = []
    for _ in range(n):
        sock = connect(h)
        sock.sendall(post(rpc_body("stream/watch")))
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        streams.append(sock)
    return streams


def healthy(h) -> None:
    """The card answers and a new task completes."""
    assert h.http.get("/.well-known/agent-card.json").status_code == 200
    task = h.send("still here")
    assert h.wait(task["id"])["status"]["state"] == "completed"


# --- slow clients ------------------------------------------------------------------------------


def test_a_request_head_that_never_completes_gets_408_and_the_door_serves_meanwhile(make_service):
    h = serve(make_service)
    slow = [connect(h) for _ in range(3)]
    slow[0].sendall(b"POS")
    slow[1].sendall(b"POST / HTTP/1.1\r\nhost: x\r\n")
    started = time.monotonic()
    healthy(h)
    for sock in slow[:2]:  # trickling bytes does not reset the deadline
        sock.sendall(b"x")
    answers = [read_all(sock) for sock in slow]
    assert all(a.startswith(b"HTTP/1.1 408 Request Timeout\r\n") for a in answers)
    assert time.monotonic() - started < 3
    healthy(h)


def test_a_body_that_never_completes_gets_408_and_creates_nothing(make_service):
    h = serve(make_service)
    sock = connect(h)
    sock.sendall(post(b"{}")[:-2].replace(b"content-length: 2", b"content-length: 1000") + b"{}")
    answer = read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head
    assert json.loads(body)["error"] == {"code": -32600, "message": "Invalid Request: the body did not arrive within 0.7 s"}
    assert h.service.registry.counts() == {}
    healthy(h)


def test_a_huge_declared_body_gets_413_within_the_drain_time(make_service):
    h = serve(make_service, limits=DoorLimits(body_timeout=30))
    sock = connect(h)
    started = time.monotonic()
    sock.sendall(post(b"ab").replace(b"content-length: 2", b"content-length: 999999999"))
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 413") and time.monotonic() - started < 4
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == -32600


def test_an_idle_kept_alive_connection_is_closed(make_service):
    h = serve(make_service)
    sock = connect(h)
    sock.sendall(b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: x\r\n\r\n")
    answer = read_all(sock, timeout=3)
    assert answer.startswith(b"HTTP/1.1 200") and closed_by_server(sock)


# --- connection floods -------------------------------------------------------------------------


def test_a_flood_of_idle_connections_evicts_the_oldest_and_new_clients_get_in(make_service):
    h = serve(make_service, limits=DoorLimits(max_connections=8, head_timeout=30))
    flood = [connect(h) for _ in range(40)]
    time.sleep(0.3)
    # young connections are let in up to twice the cap; the rest are refused at once
    refused = [s for s in flood if closed_by_server(s)]
    assert len(refused) == 40 - 16
    time.sleep(EVICT_AFTER)
    healthy(h)  # each new connection evicted the oldest idle one
    open_ = [s for s in flood if s not in refused and not closed_by_server(s)]
    assert 0 < len(open_) < 16
    kept = [s for s in flood if s not in refused]
    assert open_ == kept[len(kept) - len(open_):]  # the oldest went first


def test_when_every_connection_is_being_answered_new_ones_get_503_past_twice_the_cap(make_service):
    h = serve(make_service, limits=DoorLimits(max_connections=1, head_timeout=30, max_streams=10))
    streams = open_watches(h, 2)
    time.sleep(EVICT_AFTER)
    late = connect(h)
    assert read_all(late).startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    streams[0].close()
    time.sleep(0.2)
    assert h.http.get("/.well-known/agent-card.json").status_code == 200


def test_streams_beyond_the_cap_get_503_and_start_no_task(make_service):
    h = serve(make_service, limits=DoorLimits(max_streams=2, head_timeout=30))
    streams = open_watches(h, 2)
    for method, params in [("stream/watch", {}), ("message/stream", {"message": message("x")})]:
        response = h.http.post("/", content=rpc_body(method, params, 5), headers={"content-type": "application/json"})
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == -32031 and response.json()["id"] == 5
    assert h.service.registry.counts() == {}
    streams[0].close()
    deadline = time.monotonic() + 5
    while h.service.hub.subscribers > 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    with h.http.stream("POST", "/", content=rpc_body("stream/watch"), headers={"content-type": "application/json"}) as r:
        assert r.status_code == 200


def test_a_stream_client_that_never_reads_is_cut_off_and_unsubscribed(make_service):
    def chatty(request, ctx):
        for n in range(48):
            ctx.emit("artifact", {"tool_name": "dump", "content": f"{n}:" + "x" * 256 * 1024})
        return TaskOutcome("completed", "dumped")

    h = serve(make_service, chatty, limits=DoorLimits(stall_timeout=0.5, head_timeout=30))
    host, port = h.url.rsplit(":", 1)
    mute = socket.socket()
    mute.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    mute.connect(("127.0.0.1", int(port)))
    mute.sendall(post(rpc_body("stream/watch")))
    deadline = time.monotonic() + 5
    while h.service.hub.subscribers < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    task = h.send("go")
    assert h.wait(task["id"], timeout=20)["status"]["state"] == "completed"
    deadline = time.monotonic() + 10
    while h.service.hub.subscribers or h.service._server is None:
        assert time.monotonic() < deadline, "the stalled stream is still subscribed"
        time.sleep(0.05)
    healthy(h)


# --- HTTP framing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, status",
    [
        (b"\x00\xff GARBAGE\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ncontent-length: 5\r\n\r\n{}{}", b"400"),
        (b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: -1\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 70000, b"400"),  # a head past h11's 16 KiB
        (b"GET /\x00 HTTP/1.1\r\nhost: x\r\n\r\n", b"400"),
        (b"BREW / HTTP/1.1\r\nhost: x\r\n\r\n", b"404"),
    ],
)
def test_http_garbage_and_smuggling_shapes_are_refused(make_service, raw, status):
    h = serve(make_service)
    sock = connect(h)
    sock.sendall(raw + b"GET /.well-known/agent-card.json HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 " + status)
    if status == b"400":  # nothing after a framing error is read as a request
        assert answer.count(b"HTTP/1.1 ") == 1
    assert h.service.registry.counts() == {}
    healthy(h)


def test_pipelined_requests_are_answered_in_order(make_service):
    h = serve(make_service)
    sock = connect(h)
    bodies = [rpc_body("tasks/get", {"id": f"tsk_{n}"}, n) for n in range(5)]
    sock.sendall(b"".join(post(b) for b in bodies[:-1]) + post(bodies[-1], "connection: close\r\n"))
    answer = read_all(sock)
    ids = [json.loads(part.split(b"\r\n\r\n", 1)[1].split(b"HTTP/1.1")[0])["id"] for part in answer.split(b"HTTP/1.1 200")[1:]]
    assert ids == [0, 1, 2, 3, 4]


def test_a_host_header_the_card_cannot_echo_is_replaced(make_service):
    h = serve(make_service)
    card = h.http.get("/.well-known/agent-card.json", headers={"host": "evil.example/x?y=@z"}).json()
    assert card["url"] == h.base


# --- a failure inside one task fails that task, never the session --------------------------------


def test_a_task_md_that_cannot_be_written_fails_that_task_and_the_queue_goes_on(make_service, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the task directory should be")
    h = serve(make_service, service_kw={"task_dir": blocker / "accessible"})
    first = h.send("one")
    failed = h.wait(first["id"])
    assert failed["status"]["state"] == "failed"
    assert "cannot write" in failed["status"]["message"]["parts"][0]["text"]
    blocker.unlink()
    second = h.send("two")
    assert h.wait(second["id"])["status"]["state"] == "completed"
    assert h.running
    ends = h.trace.of("task_end")
    assert [e["exit_status"] for e in ends] == ["failed", "ok"]
    assert "cannot write" in ends[0]["error"] and "error" not in ends[1]


def test_a_result_that_cannot_be_written_fails_that_task_and_the_queue_goes_on(make_service, tmp_path):
    h = serve(make_service)
    out = tmp_path / "session" / "out"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("a file where out/ should be")
    failed = h.wait(h.send("one")["id"])
    assert failed["status"]["state"] == "failed"
    assert "cannot write the task result" in failed["status"]["message"]["parts"][0]["text"]
    out.unlink()
    assert h.wait(h.send("two")["id"])["status"]["state"] == "completed"
    assert (out / "result.txt").read_text() == "echo: two"


def test_history_and_results_an_executor_cannot_encode_are_written_as_unicode(make_service, tmp_path):
    def odd(request, ctx):
        ctx.emit("artifact", {"tool_name": "t", "content": {"n": math.nan, "s": "\ud800"}})
        return TaskOutcome("completed", "a\ud800b", history=[{"role": "assistant", "n": math.inf, "s": "\udfff"}])

    h = serve(make_service, odd, conversation="threaded")
    task = h.send("x")
    done = h.wait(task["id"])
    assert done["status"]["state"] == "completed"
    assert done["artifacts"][0]["parts"][0]["text"] == "a\ufffdb"
    session = tmp_path / "session"
    assert (session / "out" / "result.txt").read_text() == "a\ufffdb"
    history = json.loads((session / "contexts" / done["contextId"] / "history.json").read_text())
    assert history == [{"role": "assistant", "n": None, "s": "\ufffd"}]
    frames = [line for line in _watch_once(h) if line.startswith("data: ")]
    for line in frames:
        json.loads(line[6:], parse_constant=lambda name: pytest.fail(f"a frame holds {name}"))


def _watch_once(h) -> list[str]:
    """The replayed frames of stream/watch up to the first final status."""
    lines = []
    with h.http.stream("POST", "/", content=rpc_body("stream/watch"), headers={"content-type": "application/json"}) as r:
        for line in r.iter_lines():
            lines.append(line)
            if line.startswith("data: ") and '"final":true' in line:
                return lines
    return lines
