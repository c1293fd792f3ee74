"""The front under what else happens to a deployment's address: TLS end to end (pinned both ways), SSE
streams through a switch, a backend that restarts (its requests wait, none fails), hostile clients
(smuggling, oversized heads, a head that never ends), and refusals the client can read."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from front_support import Traffic, control, first_config, free_port, start_backend, start_front, write_token
from mur.front.config import Backend
from mur.front.control import switch


@pytest.fixture
def procs():
    made = []
    yield made
    for p in reversed(made):
        p.stop()


@pytest.fixture
def one(tmp_path, procs):
    """A front before backend r1 (plain HTTP)."""
    token_file = tmp_path / "token"
    token = write_token(token_file)
    r1 = start_backend("r1", token_file, delay=1.0)
    procs.append(r1)
    front_dir = tmp_path / "front"
    listen = free_port()
    first_config(front_dir, listen, Backend("r1", r1.port), token_file, connect_wait=10, switch_wait=3, head_timeout=2)
    front = start_front(front_dir, tmp_path / "front.log")
    procs.append(front)
    return {"url": f"http://127.0.0.1:{listen}", "token": token, "r1": r1, "dir": front_dir, "token_file": token_file,
            "listen": listen, "log": tmp_path / "front.log"}


def rpc(url, token, method, params, rid=1):
    return httpx.post(url + "/", json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
                      headers={"authorization": f"Bearer {token}"}, timeout=30).json()


def message(text):
    return {"message": {"kind": "message", "messageId": f"m-{text}", "role": "user", "parts": [{"kind": "text", "text": text}]}}


def test_tls_is_terminated_with_the_deployment_certificate_and_backends_are_pinned(tmp_path, procs):
    from mur.deploy.auth import _self_signed, fingerprint

    cert_pem, key_pem = _self_signed("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes(cert_pem)
    key.write_bytes(key_pem)
    key.chmod(0o600)
    pin = fingerprint(cert_pem)
    token_file = tmp_path / "token"
    token = write_token(token_file)
    r1 = start_backend("r1", token_file, tls=(cert, key))
    procs.append(r1)
    listen = free_port()
    first_config(tmp_path / "front", listen, Backend("r1", r1.port), token_file, tls_cert=str(cert), tls_key=str(key),
                 backend_pin=pin, switch_wait=2)
    procs.append(start_front(tmp_path / "front", tmp_path / "front.log"))
    traffic = Traffic(f"https://127.0.0.1:{listen}", token, pin=pin).start()
    time.sleep(0.6)
    # a backend with another certificate never gets a request (nor the token)
    other_cert, other_key = _self_signed("127.0.0.1")
    (tmp_path / "c2.pem").write_bytes(other_cert)
    (tmp_path / "k2.pem").write_bytes(other_key)
    impostor = start_backend("evil", token_file, tls=(tmp_path / "c2.pem", tmp_path / "k2.pem"))
    procs.append(impostor)
    ctl = control(tmp_path / "front")
    with pytest.raises(Exception, match="refused: backend evil"):
        ctl.apply(switch(ctl.config(), Backend("evil", impostor.port)))
    time.sleep(0.3)
    traffic.stop()
    assert traffic.failures == [] and len(traffic.answers) >= 5
    assert all(a.startswith("r1: ") for a in traffic.answers.values())


def test_streams_follow_their_backend_through_a_switch(one, procs):
    url, token = one["url"], one["token"]
    frames: list[str] = []

    def stream():
        with httpx.stream("POST", url + "/", json={"jsonrpc": "2.0", "id": 1, "method": "message/stream",
                                                   "params": message("slow-stream")},
                          headers={"authorization": f"Bearer {token}", "accept": "text/event-stream"}, timeout=30) as r:
            for line in r.iter_lines():
                frames.append(line)

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.3)
    r2 = start_backend("r2", one["token_file"])
    procs.append(r2)
    ctl = control(one["dir"])
    ctl.apply(switch(ctl.config(), Backend("r2", r2.port)))
    t.join(30)
    text = "\n".join(frames)
    assert '"final": true' in text.replace('"final":true', '"final": true') and "r1: slow-stream" in text
    assert rpc(url, token, "message/send", message("after"))["result"]["id"]
    ctl.wait_drained("r1", 10)


def test_a_restarting_backend_makes_requests_wait_not_fail(one, procs):
    url, token = one["url"], one["token"]
    traffic = Traffic(url, token).start()
    time.sleep(0.4)
    r1 = one["r1"]
    r1.popen.kill()  # a crash, and a restart by the supervisor on the same port
    r1.popen.wait()
    time.sleep(1.0)
    procs.append(start_backend("r1b", one["token_file"], port=r1.port))
    time.sleep(0.6)
    traffic.stop()
    # tasks r1 had accepted are gone with it (a crash), and a request it was answering at that moment
    # fails (502, or its answer breaks off: it may have been acted on, so it is not retried); every
    # request sent after the crash waited for the restart
    sent_failures = [f for f in traffic.failures if "(tasks/get)" not in f and "ended" not in f]
    assert len(sent_failures) <= 1, sent_failures
    assert len(traffic.sent) >= 8
    assert any(a.startswith("r1b: ") for a in traffic.answers.values())


def raw(port, data: bytes, wait: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except socket.timeout:
            pass
        return out


def test_hostile_requests_are_refused_with_an_answer(one):
    port = one["listen"]
    smuggle = (b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"0\r\n\r\nGET /admin HTTP/1.1\r\n\r\n")
    assert raw(port, smuggle).startswith(b"HTTP/1.1 400")
    assert raw(port, b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n").startswith(b"HTTP/1.1 431")
    assert raw(port, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(port, b"GET / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n").startswith(b"HTTP/1.1 4")
    t0 = time.monotonic()
    assert raw(port, b"GET / HTTP/1.1\r\nX: slow", wait=20).startswith(b"HTTP/1.1 408")  # the head never ends
    assert time.monotonic() - t0 < 8
    # without the token the backend says 401, through the front
    assert httpx.post(one["url"] + "/", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                                              "params": {"id": "tsk_" + "1" * 32}}).status_code == 401
    card = httpx.get(one["url"] + "/.well-known/agent-card.json").json()
    assert card["name"] == "r1" and card["url"].endswith(f":{port}")  # the card names the front's address
    state = json.loads((one["dir"] / "state.json").read_text())
    assert state["backends"][0]["name"] == "r1"


def test_no_backend_answering_is_a_503_after_the_wait(tmp_path, procs):
    token_file = tmp_path / "token"
    token = write_token(token_file)
    listen = free_port()
    first_config(tmp_path / "front", listen, Backend("gone", free_port()), token_file, connect_wait=1)
    procs.append(start_front(tmp_path / "front", tmp_path / "front.log"))
    r = httpx.post(f"http://127.0.0.1:{listen}/", json={"jsonrpc": "2.0", "id": 3, "method": "message/send",
                                                         "params": message("x")},
                   headers={"authorization": f"Bearer {token}"}, timeout=10)
    assert r.status_code == 503 and r.json()["id"] == 3 and "Service unavailable" in r.json()["error"]["message"]


def test_a_full_queue_makes_requests_wait_not_fail(tmp_path, procs):
    """queue_depth 1 and tasks of 0.4 s: six sent at once all complete (the front holds the ones the
    service answers "busy" and sends them again); with busy_wait 0 the service's refusals come through."""
    from concurrent.futures import ThreadPoolExecutor

    token_file = tmp_path / "token"
    token = write_token(token_file)
    r1 = start_backend("r1", token_file, delay=0.4, queue_depth=1)
    procs.append(r1)
    listen = free_port()
    first_config(tmp_path / "front", listen, Backend("r1", r1.port), token_file, busy_wait=10)
    procs.append(start_front(tmp_path / "front", tmp_path / "front.log"))
    url = f"http://127.0.0.1:{listen}"
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda i: rpc(url, token, "message/send", message(f"slow-{i}"), i), range(6)))
    assert [a["result"]["status"]["state"] for a in answers].count("rejected") == 0
    ctl = control(tmp_path / "front")
    ctl.wait(lambda st: st["counts"]["busy_retries"] > 0, ctl.config(), 5)  # state.json follows within a second
    from dataclasses import replace

    ctl.apply(replace(ctl.config(), busy_wait=0, generation=ctl.config().generation + 1))
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda i: rpc(url, token, "message/send", message(f"slow-again-{i}"), i), range(12)))
    states = [a["result"]["status"]["state"] for a in answers]
    assert states.count("rejected") > 0, (states, json.loads((tmp_path / "front" / "state.json").read_text()))


def test_a_standby_answers_while_the_active_backend_refuses(one, procs):
    """During a deploy the service stays the front's fallback: if the new release dies (or the machine
    reboots) before the deploy ends, the service answers instead of nobody."""
    ctl = control(one["dir"])
    cfg = ctl.config()
    from dataclasses import replace

    dead = Backend("twin", free_port())
    cfg = replace(cfg, backends=(dead, replace(cfg.backends[0], role="standby")), generation=cfg.generation + 1,
                  switch_wait=0.5)
    from mur.front.config import write_json

    write_json(one["dir"] / "front.json", cfg.to_dict())  # as a reboot finds it: no switch check
    procs[-1].stop()
    procs.append(start_front(one["dir"], one["log"]))
    t0 = time.monotonic()
    answer = rpc(one["url"], one["token"], "message/send", message("fallback"))
    assert answer["result"]["status"]["state"] in ("submitted", "working", "completed")
    assert time.monotonic() - t0 < 5
