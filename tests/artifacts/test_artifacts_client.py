"""The Nexus client's protocol edges, through an injected httpx transport.

The happy paths and tamper/auth/conflict paths run against a real `mur registry serve` in
integration/artifacts; these cover responses a correct server never sends (missing digest
header, a lying digest, 5xx, malformed JSON, dropped connections).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import zipfile

import httpx
import pytest

from mur.artifacts.registry_client import RemoteRegistry
from mur.artifacts.store import ArtifactMeta
from mur.errors import MurError

URL = "http://registry.test"


def artifact() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("murmur.yaml", 'name: greet\nversion: "0.1.0"\nruntime: skill\n')
        zf.writestr("skill.md", "# hi\n")
    return buf.getvalue()


DATA = artifact()
SHA = hashlib.sha256(DATA).hexdigest()


def client(handler) -> RemoteRegistry:
    return RemoteRegistry(URL, "k3y", transport=httpx.MockTransport(handler))


def error_of(fn) -> MurError:
    with pytest.raises(MurError) as err:
        fn()
    return err.value


def test_download_sends_bearer_and_platform_and_verifies():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["auth"] = request.headers["authorization"]
        seen["url"] = str(request.url)
        return httpx.Response(200, content=DATA, headers={"x-murmur-sha256": SHA})

    fetched = client(handler).fetch("greet", "0.1.0", platform="linux-x86_64")
    assert fetched.data == DATA and fetched.sha256 == SHA
    assert fetched.meta.runtime == "static" and fetched.meta.artifact_runtime == "skill"
    assert fetched.meta.platforms == []  # only native payloads carry a platform
    assert seen == {"auth": "Bearer k3y", "url": f"{URL}/v1/artifacts/greet/0.1.0?platform=linux-x86_64"}


def test_download_digest_mismatch_is_e_reg_002():
    def handler(request):
        return httpx.Response(200, content=DATA[:-1] + bytes([DATA[-1] ^ 1]), headers={"x-murmur-sha256": SHA})

    err = error_of(lambda: client(handler).fetch("greet", "0.1.0"))
    assert err.code == "E-REG-002"
    assert err.message == "artifact integrity check failed for greet@0.1.0"
    assert "retry `mur install greet@0.1.0`" in err.hint


def test_download_without_digest_header_is_refused():
    err = error_of(lambda: client(lambda r: httpx.Response(200, content=DATA)).fetch("greet", "0.1.0"))
    assert err.render() == "error[E-IO-003]: registry error: registry response missing x-murmur-sha256 header"


@pytest.mark.parametrize(
    "status, body, code, message",
    [
        (404, {"error": "artifact 'greet@0.1.0' not found"}, "E-REG-001", "artifact greet@0.1.0 not found in registry"),
        (
            401,
            {"error": "unauthorized"},
            "E-IO-003",
            f"registry error: registry authentication failed for {URL}. Check NEXUS_API_KEY and try again.",
        ),
        (
            403,
            {"error": "forbidden"},
            "E-IO-003",
            f"registry error: registry authentication failed for {URL}. Check NEXUS_API_KEY and try again.",
        ),
        (500, {"error": "disk full"}, "E-IO-003", "registry error: download failed with HTTP 500 Internal Server Error: disk full"),
    ],
)
def test_download_status_mapping(status, body, code, message):
    err = error_of(lambda: client(lambda r: httpx.Response(status, json=body)).fetch("greet", "0.1.0"))
    assert (err.code, err.message) == (code, message)


def test_dropped_connection_is_a_registry_error():
    def handler(request):
        raise httpx.ConnectError("Connection refused", request=request)

    err = error_of(lambda: client(handler).fetch("greet", "0.1.0"))
    assert err.message == f"registry error: failed to download greet@0.1.0 from {URL}: Connection refused"
    err = error_of(lambda: client(handler).publish(ArtifactMeta("greet", "0.1.0", "static", "skill"), DATA))
    assert err.message == f"registry error: failed to publish greet@0.1.0 via registry {URL}: Connection refused"


def test_publish_sends_query_and_raw_body():
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["query"] = request.url.query.decode()
        seen["body"] = request.read()
        seen["type"] = request.headers["content-type"]
        seen["length"] = request.headers["content-length"]
        return httpx.Response(201, json={"artifact_id": "greet@0.1.0", "sha256": SHA})

    meta = ArtifactMeta("greet", "0.1.0", "native", "tool", [("linux", "x86_64"), ("darwin", "aarch64")])
    result = client(handler).publish(meta, DATA)
    assert (result.artifact_id, result.sha256) == ("greet@0.1.0", SHA)
    assert seen == {
        "query": "name=greet&version=0.1.0&runtime=native&platform=linux-x86_64&platform=darwin-aarch64",
        "body": DATA,
        "type": "application/octet-stream",
        "length": str(len(DATA)),
    }


@pytest.mark.parametrize(
    "status, body, code, message",
    [
        (409, {"error": "exists"}, "E-REG-003", "artifact greet@0.1.0 already exists in registry"),
        (
            422,
            {"error": "reserved artifact version 'stable' is not allowed"},
            "E-REG-004",
            "version 'stable' is reserved and cannot be published",
        ),
        (422, {"error": "nope"}, "E-IO-003", "registry error: nope"),
        (400, {"error": "invalid runtime 'x'"}, "E-IO-003", "registry error: publish failed with HTTP 400 Bad Request: invalid runtime 'x'"),
        (401, {"error": "unauthorized"}, "E-IO-003", f"registry error: registry authentication failed for {URL}. Check NEXUS_API_KEY and try again."),
    ],
)
def test_publish_status_mapping(status, body, code, message):
    meta = ArtifactMeta("greet", "0.1.0", "static", "skill")
    err = error_of(lambda: client(lambda r: httpx.Response(status, json=body)).publish(meta, DATA))
    assert (err.code, err.message) == (code, message)


def test_publish_created_with_garbage_body():
    meta = ArtifactMeta("greet", "0.1.0", "static", "skill")
    err = error_of(lambda: client(lambda r: httpx.Response(201, content=b"<html>")).publish(meta, DATA))
    assert err.message.startswith(f"registry error: invalid publish response from {URL}: ")


def test_index_parsing():
    rows = [{"name": "greet", "version": "0.1.0", "runtime": "static", "artifact_runtime": "skill", "platforms": [["linux", "x86_64"]]}]
    (meta,) = client(lambda r: httpx.Response(200, json=rows)).list_index()
    assert (meta.name, meta.platforms, meta.description, meta.tags) == ("greet", [("linux", "x86_64")], None, [])
    bad = [{"name": "greet", "version": "0.1.0", "runtime": "static"}]
    err = error_of(lambda: client(lambda r: httpx.Response(200, json=bad)).list_index())
    assert err.message == f"registry error: invalid index response from {URL}: missing field `artifact_runtime`"


def test_transfers_are_reported_to_the_injected_progress():
    reported = []

    @contextlib.contextmanager
    def progress(description, total):
        seen = []
        yield seen.append
        reported.append((description, total, sum(seen)))

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            request.read()
            return httpx.Response(201, json={"artifact_id": "greet@0.1.0", "sha256": SHA})
        return httpx.Response(200, content=DATA, headers={"x-murmur-sha256": SHA})

    registry = RemoteRegistry(URL, "k3y", transport=httpx.MockTransport(handler), progress=progress)
    registry.publish(ArtifactMeta("greet", "0.1.0", "static", "skill"), DATA)
    registry.fetch("greet", "0.1.0")
    assert reported == [("\u2191 greet@0.1.0", len(DATA), len(DATA)), ("\u2193 greet@0.1.0", len(DATA), len(DATA))]
