"""The front's parts as data: HTTP framing (what is refused, what is relayed), which backend owns which
task, configurations and their changes, the twin's files and the ports a fronted deployment uses."""

from __future__ import annotations

import asyncio
import json

import pytest

from mur.deploy.fronted import Ports, ports_for, twin_layout, twin_spec, twin_view_command
from mur.deploy.steps import Layout
from mur.front import http
from mur.front.config import Backend, ConfigError, FrontConfig
from mur.front.control import retire, switch, write_command
from mur.front.drain import TaskBook
from mur.front.proxy import _busy, _task_of


def reader(data: bytes) -> asyncio.StreamReader:
    r = asyncio.StreamReader(limit=http.MAX_HEAD)
    r.feed_data(data)
    r.feed_eof()
    return r


def run(coro):
    return asyncio.run(coro)


def test_request_heads_and_bodies():
    async def go():
        r = reader(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        head = await http.read_head(r)
        assert http.request_line(head).method == "POST" and head.get("host") == "x"
        assert await http.read_body(r, head) == b"{}"
        r = reader(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        head = await http.read_head(r)
        assert await http.read_body(r, head) == b"{}"
        assert await http.read_head(reader(b"")) is None
    run(go())


@pytest.mark.parametrize("raw, status", [
    (b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400),  # smuggling
    (b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n", 413),
    (b"GET / HTTP/2\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", 431),
])
def test_ambiguous_or_oversized_requests_are_refused(raw, status):
    async def go():
        r = reader(raw)
        head = await http.read_head(r)
        http.request_line(head)
        await http.read_body(r, head)
    with pytest.raises(http.BadMessage) as err:
        run(go())
    assert err.value.status == status


def test_relayed_answers_keep_their_framing_and_hop_headers_go():
    async def go():
        r = reader(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\nX-A: 1\r\n\r\n"
                   b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        head = await http.read_head(r)
        out = bytearray()

        async def send(data):
            out.extend(data)
        clean = await http.relay_body(r, head, send, 200, "POST")
        return head, bytes(out), clean
    head, out, clean = run(go())
    assert out == b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n" and clean
    assert head.forwarded([("connection", "keep-alive")]) == [("X-A", "1"), ("connection", "keep-alive")]


def test_task_ownership_and_the_cache():
    book = TaskBook(owned=3, cached=2)
    a, b, c, d = (f"tsk_{i * 32}" for i in "abcd")
    book.learn(json.dumps({"result": {"id": a}}).encode(), "r1")
    book.learn(f'data: {{"id": "{b}"}}\n\n'.encode(), "r1")
    book.learn(c.encode() + b" " + d.encode(), "r2")
    assert book.owner_of(a) is None and book.owner_of(b) == "r1" and book.owned_by("r2") == [c, d]  # oldest forgotten
    book.keep(c, {"id": c, "status": {"state": "completed"}})
    book.retire("r2")
    assert book.owner_of(c) == "r2" and book.owner_of(d) is None  # only what is cached outlives its backend
    again = TaskBook()
    again.restore(book.saved())
    assert again.cached[c]["status"]["state"] == "completed" and again.owner_of(c) == "r2"


def test_what_requests_name_a_task_and_what_is_busy():
    tid = "tsk_" + "1" * 32
    assert _task_of({"method": "tasks/get", "params": {"id": tid}}) == tid
    assert _task_of({"method": "message/send", "params": {"message": {"taskId": tid}}}) == tid
    assert _task_of({"method": "message/send", "params": {"message": {}}}) is None
    assert _task_of({"method": "tasks/get", "params": {"id": "../etc"}}) is None
    busy = {"result": {"status": {"state": "rejected", "message": {"parts": [{"text": "task rejected: capsule is busy"}]}}}}
    closing = {"result": {"status": {"state": "rejected", "message": {"parts": [{"text": "task rejected: the session is closing"}]}}}}
    assert _busy(json.dumps(busy).encode()) and not _busy(json.dumps(closing).encode())


def test_configurations_and_their_changes():
    cfg = FrontConfig(listen_port=8000, backends=(Backend("r1", 9001),))
    two = switch(cfg, Backend("r2", 9002))
    assert two.generation == 2 and two.active.name == "r2" and [b.name for b in two.draining] == ["r1"]
    assert retire(two, "r1").backends == (Backend("r2", 9002, "active"),)
    assert FrontConfig.from_dict(json.loads(json.dumps(two.to_dict()))) == two
    for bad in ({"listen_port": 8000, "backends": [{"name": "a", "port": 8000}]},
                {"listen_port": 8000, "backends": [{"name": "a", "port": 1}, {"name": "b", "port": 2}]},
                {"listen_port": 8000, "backends": [{"name": "a", "port": 1, "role": "boss"}]},
                {"listen_port": 0}, {"listen_port": 8000, "tls_cert": "/c"}, []):
        with pytest.raises(ConfigError):
            FrontConfig.from_dict(bad)
    cmd = write_command("/h/.murmur/deployments/d/front", two)
    assert "umask 077" in cmd and "mv -f" in cmd and "kill -HUP" in cmd and " front run " in cmd


def test_the_twin_is_the_release_beside_with_its_own_files():
    lay = Layout("/home/u", "dep_x")
    tw = twin_layout(lay)
    assert tw.root == lay.root and tw.run_dir == f"{lay.root}/twin/run" and tw.dep_id == "dep_x-twin"
    spec = {"deployment_id": "dep_x", "release_dir": lay.current, "port": 1, "run_dir": lay.run_dir,
            "log_file": lay.log_file, "cgroup": {"name": "dep_x"}, "env": {"TMPDIR": lay.tmp_dir, "A": "b"}}
    t = twin_spec(spec, lay, 4242)
    assert (t["port"], t["bind"], t["release_dir"], t["cgroup"]["name"]) == (4242, "127.0.0.1", tw.current, "dep_x-twin")
    assert t["env"] == {"TMPDIR": f"{lay.root}/twin/tmp", "A": "b"} and spec["env"]["TMPDIR"] == lay.tmp_dir
    view = twin_view_command(lay, 3)
    assert "prestart.sh" in view and f"cp -a {lay.release(3)}/work {tw.current}/work" in view


def test_ports_of_a_fronted_deployment():
    from mur.deploy.state import Deployment, Release
    from mur.deploy.targets import TargetSpec

    def served(extra: dict) -> Deployment:  # a recorded deployment that has served a release
        return Deployment("dep_x", "ssh", TargetSpec("ssh", host="h"), release=Release.from_dict({"n": 1}), extra=extra)

    assert ports_for("dep_x", None, None, False, None, set(), "h") is None
    new = ports_for("dep_x", 8080, None, True, None, set(), "h")
    assert new.front == 8080 and len({new.front, new.service, new.twin}) == 3
    kept = ports_for("dep_x", None, served({"front": {"port": 31000}}), False, 25000, {31000, 25000}, "h")
    assert kept == Ports(front=31000, service=25000, twin=kept.twin) and kept.twin not in (31000, 25000)
    assert ports_for("dep_x", None, served({}), True, 25000, set(), "h") is None  # chosen at the first deploy only
