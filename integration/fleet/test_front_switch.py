"""The front (mur/front) as a standalone component, as a user of a deployment sees it: real processes,
real sockets on loopback, a client sending a task every 50 ms through a release switch, a refused switch to a broken release, and an upgrade of
the front itself: not one request fails, every task is answered by the release that accepted it, and
the old release's tasks stay answerable (tasks/get) after it is gone."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from front_support import (Traffic, control, first_config, free_port, start_backend, start_front, write_token)
from mur.front.config import Backend
from mur.front.control import FrontError, retire, switch


@pytest.fixture
def procs():
    made = []
    yield made
    for p in reversed(made):
        p.stop()


def test_switch_drain_refused_switch_and_front_upgrade_lose_nothing(tmp_path, procs):
    token_file = tmp_path / "token"
    token = write_token(token_file)
    r1 = start_backend("r1", token_file)
    procs.append(r1)
    front_dir = tmp_path / "front"
    listen = free_port()
    first_config(front_dir, listen, Backend("r1", r1.port), token_file, drain_timeout=30, switch_wait=3)
    front = start_front(front_dir, tmp_path / "front.log")
    procs.append(front)
    ctl = control(front_dir)
    url = f"http://127.0.0.1:{listen}"

    traffic = Traffic(url, token).start()
    time.sleep(0.5)
    traffic.extra += ["slow-1", "slow-2"]  # under way on r1 when it drains (1.5 s each, one at a time)
    time.sleep(0.3)

    r2 = start_backend("r2", token_file)
    procs.append(r2)
    cfg = ctl.apply(switch(ctl.config(), Backend("r2", r2.port))) and ctl.config()
    assert cfg.active.name == "r2" and [b.name for b in cfg.draining] == ["r1"]
    time.sleep(0.5)

    state = ctl.wait_drained("r1", timeout=20)
    r1_entry = next(b for b in state["backends"] if b["name"] == "r1")
    assert r1_entry["drained"] and not r1_entry["timed_out"]
    r1.stop()
    cfg = retire(ctl.config(), "r1")
    ctl.apply(cfg)

    # A broken release never takes the address: nothing listens on its port.
    broken = switch(ctl.config(), Backend("r3", free_port()))
    with pytest.raises(FrontError, match="generation .* refused: backend r3"):
        ctl.apply(broken)
    assert ctl.state()["generation"] == broken.generation + 1  # what serves is written back
    assert ctl.config().active.name == "r2"
    time.sleep(0.3)

    # The front itself is replaced: the new process takes the listening socket over.
    old_front = front
    front = start_front(front_dir, tmp_path / "front2.log")
    procs.append(front)
    old_front.popen.wait(30)
    time.sleep(0.5)
    traffic.stop()

    assert traffic.failures == []
    texts = dict((tid, text) for text, tid in traffic.sent)
    assert len(traffic.answers) == len(traffic.sent) > 20
    by = {"r1": 0, "r2": 0}
    for tid, answer in traffic.answers.items():
        who, _, said = answer.partition(": ")
        assert said == texts[tid]
        by[who] += 1
    assert by["r1"] > 3 and by["r2"] > 3
    slow = [tid for text, tid in traffic.sent if text.startswith("slow")]
    assert [traffic.answers[t] for t in slow] == ["r1: slow-1", "r1: slow-2"]

    # r1 is gone; its tasks are still answered (from the front's cache), and only with the token.
    with httpx.Client(base_url=url, headers={"authorization": f"Bearer {token}"}) as http:
        got = http.post("/", json={"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"id": slow[0]}}).json()
        assert got["id"] == 7 and "result" in got, got
        assert got["result"]["status"]["state"] == "completed"
        missing = http.post("/", json={"jsonrpc": "2.0", "id": 8, "method": "tasks/get",
                                       "params": {"id": "tsk_" + "0" * 32}}).json()
        assert missing["error"]["code"] == -32001
    anonymous = httpx.post(url + "/", json={"jsonrpc": "2.0", "id": 9, "method": "tasks/get", "params": {"id": slow[0]}})
    assert anonymous.status_code == 401
    state = ctl.state()
    assert state["pid"] == front.popen.pid and state["cached_tasks"] >= 2
    assert json.loads((front_dir / "front.json").read_text())["generation"] == broken.generation + 1
