"""Authenticated A2A: the token file rules, the bearer check, the card, and the door over HTTP.

TLS (a generated certificate, --cacert, --pin-sha256) and the CLI run in integration/a2a/test_a2a_auth_tls.py.
"""

from __future__ import annotations

import os
import threading

import httpx
import pytest
import typer

from mur.a2a import auth
from mur.a2a.auth import DoorAuth, bearer_matches, read_token_file, require_token_off_loopback
from mur.a2a.client import A2AClient, Credentials, parse_pin
from mur.cli.a2a import resolve_credentials
from mur.errors import MurError

QUEUE = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 4}
TOKEN = "s3cret-Token_value.~+/="


def token_file(tmp_path, text: str = TOKEN + "\n", mode: int = 0o600, name: str = "token"):
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


# --- the token file -----------------------------------------------------------------------------


def test_a_private_token_file_is_read_and_stripped(tmp_path):
    assert read_token_file(token_file(tmp_path, f"  {TOKEN}\r\n\n")) == TOKEN


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o660])
def test_a_token_file_group_or_others_can_touch_is_refused(tmp_path, mode):
    path = token_file(tmp_path, mode=mode)
    with pytest.raises(MurError) as info:
        read_token_file(path)
    assert info.value.code == "E-A2A-003"
    assert f"mode {mode:04o} lets group or others read or write it" in info.value.message
    assert info.value.hint == f"chmod 600 {path}"


@pytest.mark.parametrize(
    "text, why",
    [("", "empty"), ("  \n", "empty"), ("one two\n", "more than one token"), ("tok\nen", "more than one token"),
     ("t\u00f6ken", "not ASCII"), ("x" * 5000, "larger than 4096 bytes")],
)
def test_a_token_file_that_does_not_hold_one_token_is_refused(tmp_path, text, why):
    with pytest.raises(MurError) as info:
        read_token_file(token_file(tmp_path, text))
    assert info.value.code == "E-A2A-003" and why in info.value.message


def test_a_directory_a_fifo_and_a_missing_file_are_refused_without_hanging(tmp_path):
    (tmp_path / "dir").mkdir(mode=0o700)
    os.mkfifo(tmp_path / "fifo", 0o600)
    for name, why in [("dir", "not a regular file"), ("fifo", "not a regular file"), ("missing", "cannot open it")]:
        with pytest.raises(MurError) as info:
            read_token_file(tmp_path / name)
        assert info.value.code == "E-A2A-003" and why in info.value.message


def test_a_symlink_to_a_private_token_file_is_followed(tmp_path):
    # Operators mount secrets this way (Kubernetes projects them as symlinks); what counts is the file.
    target = token_file(tmp_path)
    (tmp_path / "link").symlink_to(target)
    assert read_token_file(tmp_path / "link") == TOKEN


# --- the bearer check ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header, ok",
    [(f"Bearer {TOKEN}", True), (f"bearer {TOKEN}", True), (f"BEARER  {TOKEN} ", True), (None, False), ("", False),
     ("Bearer", False), (f"Basic {TOKEN}", False), (f"Bearer {TOKEN}x", False), (f"Bearer {TOKEN[:-1]}", False),
     (TOKEN, False), ("Bearer \u00ff\u00fe", False)],
)
def test_bearer_matches(header, ok):
    assert bearer_matches(header, TOKEN) is ok


def test_the_token_is_compared_in_constant_time(monkeypatch):
    seen = []
    real = auth.hmac.compare_digest

    def spy(a, b):
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert not bearer_matches("Bearer guess", TOKEN)
    assert bearer_matches(f"Bearer {TOKEN}", TOKEN)
    import hashlib
    digest = hashlib.sha256(TOKEN.encode()).digest()
    assert seen == [(hashlib.sha256(b"guess").digest(), digest), (digest, digest)]
    assert all(len(a) == len(b) for a, b in seen)  # compare_digest leaks a length mismatch


# --- binding, TLS files ----------------------------------------------------------------------


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.1.2.3", "192.168.0.1", "fe80::1%eth0"])
def test_off_loopback_without_a_token_is_refused(address):
    with pytest.raises(MurError) as info:
        require_token_off_loopback(address, DoorAuth())
    assert info.value.code == "E-A2A-005" and "--a2a-token-file" in info.value.hint
    require_token_off_loopback(address, DoorAuth(token=TOKEN))


@pytest.mark.parametrize("address", ["127.0.0.1", "127.1.2.3", "::1"])
def test_loopback_needs_no_token(address):
    require_token_off_loopback(address, DoorAuth())


def test_tls_files_must_come_as_a_usable_pair(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    with pytest.raises(MurError) as info:
        auth.tls_files(junk, None)
    assert info.value.code == "E-A2A-004" and "both" in info.value.message
    with pytest.raises(MurError) as info:
        auth.tls_files(junk, junk)
    assert info.value.code == "E-A2A-004" and str(junk) in info.value.message
    assert auth.tls_files(None, None) is None


# --- client credentials ------------------------------------------------------------------------


def test_resolve_credentials_prefers_flags_then_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MURMUR_A2A_TOKEN", "from-env")
    assert resolve_credentials("localhost:1", None, None, None, None) == ("http://localhost:1", Credentials("from-env"))
    assert resolve_credentials("localhost:1", "flag", None, None, None)[1].token == "flag"
    assert resolve_credentials("localhost:1", None, token_file(tmp_path), None, None)[1].token == TOKEN
    with pytest.raises(typer.BadParameter):
        resolve_credentials("localhost:1", "flag", token_file(tmp_path), None, None)
    monkeypatch.delenv("MURMUR_A2A_TOKEN")
    assert resolve_credentials("localhost:1", None, None, None, None)[1] == Credentials()


def test_tls_credentials_make_a_bare_target_https(tmp_path):
    pin = "AB:" * 31 + "AB"
    url, creds = resolve_credentials("localhost:9", None, None, None, pin)
    assert url == "https://localhost:9" and creds.pin_sha256 == "ab" * 32
    assert resolve_credentials("localhost:9", None, None, tmp_path / "ca.pem", None)[0] == "https://localhost:9"
    assert resolve_credentials("http://localhost:9", None, None, None, pin)[0] == "http://localhost:9"  # as given


@pytest.mark.parametrize("pin", ["", "abc", "zz" * 32, "ab" * 33])
def test_a_bad_pin_is_a_usage_error(pin):
    with pytest.raises(ValueError):
        parse_pin(pin)
    with pytest.raises(typer.BadParameter):
        resolve_credentials("localhost:1", None, None, None, pin)


# --- the door over HTTP ------------------------------------------------------------------------


@pytest.fixture
def secured(make_service):
    return make_service(service_kw={"auth": DoorAuth(token=TOKEN)}, **QUEUE)


def test_the_card_stays_public_and_declares_the_bearer_scheme(secured):
    card = httpx.get(secured.base + "/.well-known/agent-card.json")
    assert card.status_code == 200
    assert card.json()["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    assert card.json()["security"] == [{"bearer": []}]


def test_an_open_door_declares_no_scheme(make_service):
    card = make_service(**QUEUE).http.get("/.well-known/agent-card.json").json()
    assert "securitySchemes" not in card and "security" not in card


@pytest.mark.parametrize(
    "headers, reason, challenge",
    [({}, "unauthenticated", "Bearer"), ({"authorization": "Bearer nope"}, "invalid_token", 'Bearer error="invalid_token"'),
     ({"authorization": f"Basic {TOKEN}"}, "invalid_token", 'Bearer error="invalid_token"')],
)
def test_without_the_right_token_every_request_is_401_and_nothing_runs(secured, headers, reason, challenge):
    bodies = [
        ("POST", "/", {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"messageId": "m", "role": "user", "parts": [{"text": "x"}]}}}),
        ("POST", "/", {"jsonrpc": "2.0", "id": 2, "method": "stream/watch"}),
        ("POST", "/", {"jsonrpc": "2.0", "id": 3, "method": "tasks/get"}),
        ("GET", "/", None),
        ("POST", "/.well-known/agent-card.json", None),
    ]
    for method, path, body in bodies:
        response = httpx.request(method, secured.base + path, json=body, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == challenge
        err = response.json()
        assert err["jsonrpc"] == "2.0" and err["id"] is None
        assert err["error"]["code"] == -32030 and err["error"]["data"] == {"reason": reason}
    assert secured.service.registry.counts() == {}


def test_with_the_token_the_door_serves_and_the_client_reports_401_clearly(secured):
    with A2AClient(secured.url, credentials=Credentials(token=TOKEN)) as client:
        task = client.send("hello")
        assert client.wait(task["id"], 10)["status"]["state"] == "completed"
    for creds, wrong in [(Credentials(), False), (Credentials(token="nope"), True)]:
        with A2AClient(secured.url, credentials=creds) as client, pytest.raises(MurError) as info:
            client.send("x")
        assert info.value.code == "E-A2A-002"
        assert ("this one is wrong" in info.value.message) is wrong and "--token" in info.value.hint
        with A2AClient(secured.url, credentials=creds) as client, pytest.raises(MurError) as info:
            next(client.watch())
        assert info.value.code == "E-A2A-002"


def test_stream_watch_with_the_token_streams(secured):
    frames = []
    done = threading.Event()

    def follow():
        with A2AClient(secured.url, credentials=Credentials(token=TOKEN)) as client:
            for event in client.watch():
                frames.append(event.event)
                if event.event == "status" and event.data.get("final"):
                    done.set()
                    return

    watcher = threading.Thread(target=follow, daemon=True)
    watcher.start()
    with A2AClient(secured.url, credentials=Credentials(token=TOKEN)) as client:
        client.send("hi")
    assert done.wait(10)
    assert frames[0] == "connection-ack" and "status" in frames
