"""Authenticated A2A end to end: a generated TLS certificate (cryptography), the bearer token, the
`mur send` / `mur watch` flags (--token-file, --cacert, --pin-sha256), the a2a-sdk client with its
AuthInterceptor, and `mur run` serving HTTPS or refusing what it must refuse."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mur.a2a.auth import DoorAuth
from mur.a2a.client import certificate_sha256

TOKEN = "tok_" + "a1B2" * 8
QUEUE = {"task_acceptance": "queue", "after_task": "sleep", "queue_depth": 4}


@dataclass
class Cert:
    cert: Path
    key: Path
    pin: str


def make_cert(directory: Path, name: str) -> Cert:
    """A self-signed certificate for localhost and 127.0.0.1, as `mur deploy --tls self-signed` makes one."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    paths = Cert(directory / f"{name}.crt", directory / f"{name}.key", certificate_sha256(cert.public_bytes(serialization.Encoding.DER)))
    paths.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    paths.key.chmod(0o600)
    return paths


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Cert, Cert]:
    directory = tmp_path_factory.mktemp("tls")
    return make_cert(directory, "server"), make_cert(directory, "other")


@pytest.fixture
def token_file(tmp_path) -> Path:
    path = tmp_path / "a2a.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (TOKEN + "\n").encode())
    os.close(fd)
    return path


def mur(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "MURMUR_A2A_TOKEN": "", **(env or {})}
    return subprocess.run([sys.executable, "-m", "mur", *args], env=full, cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def https_door(make_service, certs):
    server, _ = certs
    return make_service(service_kw={"auth": DoorAuth(TOKEN, server.cert, server.key)}, **QUEUE)


def test_mur_send_verifies_the_server_by_ca_file_or_by_pin_and_sends_the_token(https_door, certs, token_file):
    server, other = certs
    url = https_door.url
    assert url.startswith("https://localhost:")
    by_ca = mur("send", url, "by ca", "--token-file", str(token_file), "--cacert", str(server.cert))
    assert (by_ca.returncode, by_ca.stdout, by_ca.stderr) == (0, "echo: by ca\n", "")
    bare = url.removeprefix("https://")  # the pin alone makes a bare host:port https
    no_token = mur("send", bare, "by pin", "--pin-sha256", server.pin.upper())
    assert no_token.returncode == 1 and no_token.stderr.startswith("error[E-A2A-002]: ")  # the pin held; no token
    by_pin = mur("send", bare, "by pin", "--pin-sha256", server.pin.upper(), env={"MURMUR_A2A_TOKEN": TOKEN})
    assert (by_pin.returncode, by_pin.stdout) == (0, "echo: by pin\n"), by_pin.stderr


@pytest.mark.parametrize("how", ["wrong pin", "wrong ca", "system cas"])
def test_an_untrusted_certificate_is_refused_before_the_token_leaves(https_door, certs, token_file, how):
    server, other = certs
    flags = {"wrong pin": ["--pin-sha256", other.pin], "wrong ca": ["--cacert", str(other.cert)], "system cas": []}[how]
    result = mur("send", https_door.url, "x", "--token", TOKEN, *flags)
    assert result.returncode == 1
    assert result.stderr.startswith("error[E-A2A-004]: ") and "--pin-sha256" in result.stderr
    if how == "wrong pin":
        assert f"not the pinned {other.pin}" in result.stderr
    assert https_door.service.registry.counts() == {}  # no request got through


def test_a_wrong_token_over_tls_is_a_clear_401(https_door, certs):
    server, _ = certs
    result = mur("send", https_door.url, "x", "--token", "nope", "--pin-sha256", server.pin)
    assert result.returncode == 1
    assert result.stderr.startswith("error[E-A2A-002]: ") and "this one is wrong" in result.stderr
    assert "hint: pass the capsule's token: --token" in result.stderr


def test_mur_watch_follows_an_https_door_with_the_token(https_door, certs, token_file):
    server, _ = certs
    sent = mur("send", "--json", https_door.url, "watched", "--token-file", str(token_file), "--cacert", str(server.cert))
    task_id = json.loads(sent.stdout)["id"]
    watched = mur("watch", https_door.url, "--task", task_id, "--token-file", str(token_file), "--pin-sha256", server.pin)
    assert watched.returncode == 0, watched.stderr
    assert "[completed]\n  echo: watched\n" in watched.stdout
    assert https_door.service.registry.counts() == {"completed": 1}


class StaticToken:
    """An a2a-sdk CredentialService that has one bearer token for every scheme the card names."""

    def __init__(self, token: str):
        self.token = token

    async def get_credentials(self, security_scheme_name, context):
        return self.token if security_scheme_name == "bearer" else None


def test_a2a_sdk_reads_the_card_scheme_and_sends_the_token_over_tls(https_door, certs):
    pytest.importorskip("a2a.client")
    from a2a.client import ClientConfig, create_client
    from a2a.client.auth import AuthInterceptor
    from a2a.helpers.proto_helpers import get_artifact_text, new_text_message
    from a2a.types import GetTaskRequest, Role, SendMessageRequest, TaskState

    server, _ = certs
    verify = ssl.create_default_context(cafile=str(server.cert))
    base = https_door.url

    async def go(interceptors):
        async with httpx.AsyncClient(verify=verify) as http:
            client = await create_client(base, client_config=ClientConfig(streaming=False, httpx_client=http), interceptors=interceptors)
            assert client._card.security_schemes["bearer"].http_auth_security_scheme.scheme == "bearer"
            msg = new_text_message("hello over tls", role=Role.ROLE_USER)
            events = [ev async for ev in client.send_message(SendMessageRequest(message=msg))]
            task_id = events[0].task.id
            deadline = time.monotonic() + 15
            while (task := await client.get_task(GetTaskRequest(id=task_id))).status.state != TaskState.TASK_STATE_COMPLETED:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            return get_artifact_text(task.artifacts[0])

    assert asyncio.run(go([AuthInterceptor(StaticToken(TOKEN))])) == "echo: hello over tls"
    with pytest.raises(Exception) as info:  # without the interceptor the card is read, the call is refused
        asyncio.run(go([]))
    assert "401" in str(info.value) or "Unauthorized" in str(info.value)


# --- mur run ---------------------------------------------------------------------------------------


def run_env(home: Path) -> dict:
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "MURMUR_A2A_TIMEOUT_SECS": "60", "MUR_CACHE_DIR": str(Path.home() / ".murmur" / "cache")}


def test_mur_run_serves_https_with_a_token_file(hello, certs, token_file, tmp_path):
    server, _ = certs
    env = {**os.environ, **run_env(tmp_path / "home"), "MURMUR_A2A_TOKEN_FILE": str(token_file)}
    run = subprocess.Popen(
        [sys.executable, "-m", "mur", "run", "--json", "--lifecycle-task-acceptance", "queue", "--lifecycle-after-task",
         "sleep", "--tls-cert", str(server.cert), "--tls-key", str(server.key)],
        cwd=hello, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = run.stdout.readline()
        assert line, run.stderr.read()
        url = json.loads(line)["url"]
        assert url.startswith("https://localhost:")
        card = httpx.get(url + "/.well-known/agent-card.json", verify=ssl.create_default_context(cafile=str(server.cert)))
        assert card.json()["url"] == url and card.json()["security"] == [{"bearer": []}]
        assert httpx.post(url + "/", json={}, verify=False).status_code == 401
        sent = mur("send", url, "Ada", "--token-file", str(token_file), "--pin-sha256", server.pin)
        assert (sent.returncode, sent.stdout) == (0, "Hello, Ada!\n"), sent.stderr
        run.send_signal(signal.SIGTERM)
        assert run.wait(30) == 0
        assert run.stderr.read() == ""
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def sessions(capsule_dir: Path) -> set[str]:
    workdir = capsule_dir / "workdir"
    return {p.name for p in workdir.iterdir()} if workdir.exists() else set()


def test_mur_run_refuses_a_token_file_others_can_read_before_anything_exists(hello, tmp_path, token_file):
    before = sessions(hello)
    token_file.chmod(0o644)
    for args, env in [(["--a2a-token-file", str(token_file)], {}), ([], {"MURMUR_A2A_TOKEN_FILE": str(token_file)})]:
        result = mur("run", *args, env={**run_env(tmp_path / "home"), **env}, cwd=hello)
        assert result.returncode == 1
        assert result.stderr.startswith(f"error[E-A2A-003]: token file {token_file}: mode 0644 lets group or others")
        assert f"hint: chmod 600 {token_file}" in result.stderr
    assert sessions(hello) == before


def test_mur_run_refuses_an_open_door_off_loopback_and_bad_tls_inputs(hello, tmp_path, certs):
    server, other = certs
    before = sessions(hello)
    env = run_env(tmp_path / "home")
    off = mur("run", "--bind", "0.0.0.0", env=env, cwd=hello)
    assert off.returncode == 1 and off.stderr.startswith("error[E-A2A-005]: refusing to serve A2A on 0.0.0.0")
    half = mur("run", "--tls-cert", str(server.cert), env=env, cwd=hello)
    assert half.returncode == 2 and "--tls-cert and --tls-key go together" in half.stderr
    mismatched = mur("run", "--tls-cert", str(server.cert), "--tls-key", str(other.key), env=env, cwd=hello)
    assert mismatched.returncode == 1 and mismatched.stderr.startswith("error[E-A2A-004]: cannot use the TLS certificate")
    assert sessions(hello) == before


def test_a_tls_client_that_never_finishes_its_handshake_is_cut_at_the_head_deadline(make_service, certs):
    """asyncio makes a TLS connection (and the connection cap sees it) only once its handshake is
    done, and waits 60 s for one by default: silent or half-sent handshakes would hold file
    descriptors past every limit. The handshake counts against the head deadline."""
    import socket

    from mur.a2a.listen import DoorLimits
    from mur.testing.sockets import client_hello, read_all

    server, _ = certs
    h = make_service(service_kw={"auth": DoorAuth(TOKEN, server.cert, server.key),
                                 "limits": DoorLimits(head_timeout=0.5)}, **QUEUE)
    port = int(h.url.rsplit(":", 1)[1])
    silent, half = socket.create_connection(("127.0.0.1", port)), socket.create_connection(("127.0.0.1", port))
    half.sendall(client_hello("localhost")[:40])
    started = time.monotonic()
    for sock in (silent, half):
        read_all(sock, timeout=10)  # ends when the door closes it
    assert time.monotonic() - started < 5
    card = httpx.get(h.url + "/.well-known/agent-card.json", verify=str(server.cert))
    assert card.status_code == 200
