"""Artifacts end to end through real `mur registry serve` processes on 127.0.0.1.

build -> publish -> install into a clean HOME -> list/doctor -> run; tampering in the registry's
store, in a project store and in transit; concurrent publishes; auth, reserved, existing and
lock-mismatch refusals. Every `mur` here is a separate process (`python -m mur`).
"""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from artifacts_registry_helpers import KEY, mur, registry_server, write_capsule, write_skill  # type: ignore[import-not-found]

REPO = Path(__file__).resolve().parents[2]
GREET = '  - name: greet\n    version: "0.1.0"\n    runtime: skill\n    local_source: false\n'


def build(src: Path, home: Path) -> Path:
    result = mur(["build", str(src)], cwd=src.parent, home=home)
    assert result.code == 0, result.err
    return Path(result.out.strip().removeprefix("Built artifact: "))


def publish(zip_path: Path, url: str, home: Path, key: str = KEY):
    return mur(["publish", str(zip_path), "--registry", url], cwd=zip_path.parent, home=home, NEXUS_API_KEY=key)


def nothing_installed(project: Path) -> bool:
    return not (project / ".murmur" / "artifacts" / "greet").exists() and not (project / "murmur.lock").exists()


@pytest.fixture
def author(tmp_path) -> Path:
    home = tmp_path / "author-home"
    home.mkdir()
    return home


@pytest.fixture
def user(tmp_path) -> Path:
    home = tmp_path / "user-home"
    home.mkdir()
    return home


def test_round_trip_build_publish_install_list_doctor(tmp_path, registry, author, user):
    zip_path = build(write_skill(tmp_path / "src" / "greet"), author)
    result = publish(zip_path, registry.url, author)
    assert (result.code, result.out, result.err) == (0, "Published greet@0.1.0\n", "")
    stored = registry.data / "greet" / "0.1.0"
    assert (stored / "greet-0.1.0.mur.zip").read_bytes() == zip_path.read_bytes()
    digest = hashlib.sha256(zip_path.read_bytes()).hexdigest()
    assert (stored / "greet-0.1.0.sha256").read_text() == digest

    project = write_capsule(tmp_path / "project", GREET)
    result = mur(["install", "greet@0.1.0", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY=KEY)
    installed = project / ".murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip"
    assert (result.code, result.out) == (0, f"Installed greet@0.1.0 \u2192 {installed}\n"), result.err
    assert installed.read_bytes() == zip_path.read_bytes()
    assert (project / "murmur.lock").read_text() == (
        f"lock_version: 1\nartifacts:\n- name: greet\n  resolved_version: 0.1.0\n  sha256:\n    wasm: {digest}\n"
    )
    assert not (user / ".murmur").exists()  # a project install does not touch the global store

    listing = mur(["list"], cwd=project, home=user)
    assert listing.out == "NAME   VERSION  RUNTIME  PLATFORMS\ngreet  0.1.0    skill    \u2014\n"
    doctor = mur(["doctor"], cwd=project, home=user)
    assert doctor.code == 0 and "  \u2713  greet@0.1.0   project, lock ok\n" in doctor.out

    # bare name = latest, -g = global store without a lock
    newer = build(write_skill(tmp_path / "src" / "greet2", version="0.2.0"), author)
    assert publish(newer, registry.url, author).code == 0
    result = mur(["install", "-g", "greet", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY=KEY)
    assert result.out == "Installed greet@0.2.0 \u2192 ~/.murmur/artifacts/greet/0.2.0/greet-0.2.0.mur.zip\n"
    assert "resolved_version: 0.1.0\n" in (project / "murmur.lock").read_text()  # -g never touches the lock
    assert (user / ".murmur/artifacts/greet/0.2.0/greet-0.2.0.mur.zip").read_bytes() == newer.read_bytes()

    index = httpx.get(f"{registry.url}/v1/artifacts", headers={"authorization": f"Bearer {KEY}"}).json()
    assert index == [
        {"name": "greet", "version": v, "runtime": "static", "artifact_runtime": "skill", "platforms": [], "description": None, "tags": []}
        for v in ("0.1.0", "0.2.0")
    ]


def test_a_flipped_byte_in_the_registry_store_is_refused(tmp_path, registry, author, user):
    zip_path = build(write_skill(tmp_path / "src"), author)
    assert publish(zip_path, registry.url, author).code == 0
    served = registry.data / "greet/0.1.0/greet-0.1.0.mur.zip"
    raw = bytearray(served.read_bytes())
    raw[len(raw) // 3] ^= 0x04
    served.write_bytes(bytes(raw))
    project = write_capsule(tmp_path / "project", GREET)
    result = mur(["install", "greet@0.1.0", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY=KEY)
    assert result.code == 1
    assert result.err.startswith("error[E-REG-002]: artifact integrity check failed for greet@0.1.0\n  hint: ")
    assert nothing_installed(project)


def test_a_flipped_byte_in_the_project_store_is_refused_by_doctor_and_resolve(tmp_path, registry, author, user):
    zip_path = build(write_skill(tmp_path / "src"), author)
    assert publish(zip_path, registry.url, author).code == 0
    project = write_capsule(tmp_path / "project", GREET)
    assert mur(["install", "greet@0.1.0", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY=KEY).code == 0
    local = project / ".murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip"
    raw = bytearray(local.read_bytes())
    raw[10] ^= 0x01
    local.write_bytes(bytes(raw))
    doctor = mur(["doctor"], cwd=project, home=user)
    assert doctor.code == 1
    assert "artifact integrity check failed for greet@0.1.0" in doctor.out
    assert "Fix: mur install greet@0.1.0\n" in doctor.out


class _TamperingProxy(http.server.BaseHTTPRequestHandler):
    upstream = ""

    def do_GET(self):  # noqa: N802 - http.server naming
        resp = httpx.get(self.upstream + self.path, headers={"authorization": self.headers.get("authorization", "")})
        body = bytearray(resp.content)
        if resp.status_code == 200:
            body[len(body) // 2] ^= 0x01  # one byte changed in transit, digest header kept
        self.send_response(resp.status_code)
        for name in ("content-type", "x-murmur-sha256"):
            if name in resp.headers:
                self.send_header(name, resp.headers[name])
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(bytes(body))

    def log_message(self, *args):
        pass


def test_a_byte_changed_in_transit_is_refused_and_nothing_written(tmp_path, registry, author, user):
    zip_path = build(write_skill(tmp_path / "src"), author)
    assert publish(zip_path, registry.url, author).code == 0
    handler = type("Proxy", (_TamperingProxy,), {"upstream": registry.url})
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        project = write_capsule(tmp_path / "project", GREET)
        via = f"http://127.0.0.1:{proxy.server_address[1]}"
        result = mur(["install", "greet@0.1.0", "--registry", via], cwd=project, home=user, NEXUS_API_KEY=KEY)
        assert result.code == 1
        assert result.err == (
            "error[E-REG-002]: artifact integrity check failed for greet@0.1.0\n"
            "  hint: the bytes received do not match the registry's x-murmur-sha256; nothing was installed \u2014 "
            "retry `mur install greet@0.1.0`, and check for a proxy altering downloads\n"
        )
        assert nothing_installed(project)
        # the same install straight from the registry works
        assert mur(["install", "greet@0.1.0", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY=KEY).code == 0
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_concurrent_cli_publishes_leave_exactly_one(tmp_path, registry, author):
    zips = []
    for i in range(5):
        zips.append(build(write_skill(tmp_path / f"src{i}" / "greet", body=f"variant {i}\n"), author))
    with ThreadPoolExecutor(len(zips)) as pool:
        results = list(pool.map(lambda z: publish(z, registry.url, author), zips))
    winners = [r for r in results if r.code == 0]
    losers = [r for r in results if r.code != 0]
    assert len(winners) == 1 and winners[0].out == "Published greet@0.1.0\n"
    assert all(r.err.startswith("error[E-REG-003]: artifact greet@0.1.0 already exists in registry\n") for r in losers)
    stored = registry.data / "greet/0.1.0"
    payloads = sorted(p.name for p in stored.iterdir() if p.name.endswith(".mur.zip"))
    assert payloads == ["greet-0.1.0.mur.zip"]
    data = (stored / "greet-0.1.0.mur.zip").read_bytes()
    assert data in [z.read_bytes() for z in zips]
    assert (stored / "greet-0.1.0.sha256").read_text() == hashlib.sha256(data).hexdigest()


def test_a_burst_of_raw_posts_gets_one_201(tmp_path, registry, author):
    zip_path = build(write_skill(tmp_path / "src"), author)
    data = zip_path.read_bytes()
    barrier = threading.Barrier(16)

    def post(_):
        barrier.wait()
        return httpx.post(
            f"{registry.url}/v1/artifacts",
            params={"name": "greet", "version": "0.1.0", "runtime": "static"},
            content=data,
            headers={"authorization": f"Bearer {KEY}", "content-type": "application/octet-stream"},
            timeout=30,
        )

    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(post, range(16)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201] + [409] * 15
    assert [r.json() for r in responses if r.status_code == 409][0] == {"error": "artifact 'greet@0.1.0' already exists"}
    assert not list((registry.data / ".uploads").iterdir())


def test_wrong_key_reserved_and_existing_versions(tmp_path, registry, author, user):
    zip_path = build(write_skill(tmp_path / "src"), author)
    result = publish(zip_path, registry.url, author, key="not-the-key")
    assert result.code == 1
    assert result.err == (
        f"error[E-IO-003]: registry error: registry authentication failed for {registry.url}. "
        "Check NEXUS_API_KEY and try again.\n"
        "  hint: export NEXUS_API_KEY with the key `mur registry serve` was started with\n"
    )
    assert publish(zip_path, registry.url, author).code == 0
    again = publish(zip_path, registry.url, author)
    assert again.err == (
        "error[E-REG-003]: artifact greet@0.1.0 already exists in registry\n"
        "  hint: use a new version string, or remove it on the registry host\n"
    )
    project = write_capsule(tmp_path / "project", GREET)
    result = mur(["install", "greet@0.1.0", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY="nope")
    assert result.code == 1 and "registry authentication failed" in result.err
    assert nothing_installed(project)

    reserved = build(write_skill(tmp_path / "latest", version="latest"), author)
    result = publish(reserved, registry.url, author)
    assert result.err == (
        "error[E-REG-004]: version 'latest' is reserved and cannot be published\n"
        "  hint: reserved strings: latest, stable, edge \u2014 use an explicit semver version\n"
    )
    # the server refuses it too (a client that skips the check still cannot publish one)
    from mur.artifacts.registry_client import RemoteRegistry
    from mur.artifacts.store import ArtifactMeta
    from mur.errors import MurError

    with pytest.raises(MurError) as err:
        RemoteRegistry(registry.url, KEY).publish(ArtifactMeta("greet", "stable", "static", "skill"), zip_path.read_bytes())
    assert err.value.code == "E-REG-004"
    assert err.value.message == "version 'stable' is reserved and cannot be published"


def test_lock_mismatch_on_install_is_refused_with_nothing_written(tmp_path, registry, author, user):
    first = build(write_skill(tmp_path / "a" / "greet", body="first\n"), author)
    assert publish(first, registry.url, author).code == 0
    project = write_capsule(tmp_path / "project", GREET)
    assert mur(["install", "greet@0.1.0", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY=KEY).code == 0
    lock_before = (project / "murmur.lock").read_bytes()
    installed = project / ".murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip"
    zip_before = installed.read_bytes()

    with registry_server(tmp_path / "other-registry") as other:
        second = build(write_skill(tmp_path / "b" / "greet", body="second, different bytes\n"), author)
        assert publish(second, other.url, author).code == 0
        result = mur(["install", "greet@0.1.0", "--registry", other.url], cwd=project, home=user, NEXUS_API_KEY=KEY)
    old = hashlib.sha256(first.read_bytes()).hexdigest()
    new = hashlib.sha256(second.read_bytes()).hexdigest()
    assert result.code == 1
    assert result.err == (
        f"error[E-REG-005]: murmur.lock conflict for 'greet': pinned greet@0.1.0 (sha256 {old}), "
        f"but the registry now resolves greet@0.1.0 (sha256 {new})\n"
        "  hint: if this is an intentional upgrade, remove the stale entry from murmur.lock before installing again\n"
    )
    assert (project / "murmur.lock").read_bytes() == lock_before
    assert installed.read_bytes() == zip_before


def test_http_api_contract(tmp_path, registry, author):
    url, auth = registry.url, {"authorization": f"Bearer {KEY}"}
    assert httpx.get(f"{url}/v1/artifacts").status_code == 401
    bad = httpx.get(f"{url}/v1/artifacts", headers={"authorization": "Bearer wrong"})
    assert (bad.status_code, bad.json()) == (401, {"error": "unauthorized"})
    missing = httpx.get(f"{url}/v1/artifacts/greet/0.1.0", headers=auth)
    assert (missing.status_code, missing.json()) == (404, {"error": "artifact 'greet@0.1.0' not found"})

    native_src = tmp_path / "native"
    native_src.mkdir()
    (native_src / "murmur.yaml").write_text(
        'name: nt\nversion: "1.0.0"\nruntime: tool\nimplementation: native\nrequires_files:\n  - bin/nt\n'
    )
    (native_src / "bin").mkdir()
    (native_src / "bin/nt").write_text("#!/bin/sh\necho hi\n")
    data = build(native_src, author).read_bytes()

    def post(**params):
        return httpx.post(f"{url}/v1/artifacts", params=params, content=data, headers=auth)

    r = post(name="nt", version="1.0.0", runtime="bogus")
    assert (r.status_code, r.json()) == (400, {"error": "invalid runtime 'bogus' (expected wasm|native|static)"})
    r = post(name="nt", version="1.0.0", runtime="native", platform="linux")
    assert (r.status_code, r.json()) == (400, {"error": "invalid platform 'linux' (expected os-arch, e.g. darwin-aarch64)"})
    r = post(name="nt", version="edge", runtime="native")
    assert (r.status_code, r.json()) == (422, {"error": "reserved artifact version 'edge' is not allowed"})
    r = post(name="other", version="1.0.0", runtime="native")
    assert (r.status_code, r.json()) == (400, {"error": "artifact body packs murmur.yaml for nt@1.0.0, not other@1.0.0"})
    r = httpx.post(f"{url}/v1/artifacts", params={"name": "nt", "version": "1.0.0", "runtime": "native"}, content=b"junk", headers=auth)
    assert r.status_code == 400 and r.json()["error"].startswith("artifact body is not a valid .mur.zip: ")
    r = post(name="nt", version="1.0.0", runtime="native", platform="linux-x86_64")
    assert (r.status_code, r.json()) == (201, {"artifact_id": "nt@1.0.0", "sha256": hashlib.sha256(data).hexdigest()})

    got = httpx.get(f"{url}/v1/artifacts/nt/1.0.0", params={"platform": "linux-x86_64"}, headers=auth)
    assert got.status_code == 200 and got.content == data
    assert got.headers["x-murmur-sha256"] == hashlib.sha256(data).hexdigest()
    assert got.headers["content-type"] == "application/octet-stream"
    other = httpx.get(f"{url}/v1/artifacts/nt/1.0.0", params={"platform": "darwin-aarch64"}, headers=auth)
    assert (other.status_code, other.json()) == (404, {"error": "artifact 'nt@1.0.0' has no variant for platform 'darwin-aarch64'"})
    index = httpx.get(f"{url}/v1/artifacts", headers=auth).json()
    assert index == [
        {"name": "nt", "version": "1.0.0", "runtime": "native", "artifact_runtime": "tool", "platforms": [["linux", "x86_64"]], "description": None, "tags": []}
    ]


def test_serve_refuses_to_start_without_a_key(tmp_path):
    result = mur(["registry", "serve", "--bind", "127.0.0.1:0", "--data", str(tmp_path / "d")], cwd=tmp_path, home=tmp_path)
    assert result.code == 1
    assert result.err == (
        "error[E-IO-003]: NEXUS_API_KEY is required to run the registry: it is the bearer token every client must present\n"
        "  hint: export NEXUS_API_KEY=<a long random secret>, then run `mur registry serve` again\n"
    )


@pytest.mark.slow
def test_published_tool_runs_from_a_clean_home(tmp_path, request, built_hello, registry, author, user):
    """A tool published to the registry, installed into a clean HOME, runs; a flipped byte then stops it.

    Only the wasmtime compile cache is shared (MUR_CACHE_DIR, the invoking user's): it holds
    compiled code keyed by component hash, never artifacts, so HOME stays clean of both stores.
    """
    cache = {"MUR_CACHE_DIR": os.environ.get("MUR_CACHE_DIR") or str(Path.home() / ".murmur" / "cache")}
    hello = built_hello
    greet_src = tmp_path / "greet"
    shutil.copytree(hello / "greet", greet_src, ignore=shutil.ignore_patterns("__pycache__", "*.mur.zip"))
    zip_path = build(greet_src, author)
    assert publish(zip_path, registry.url, author).code == 0

    project = tmp_path / "hello"
    project.mkdir()
    shutil.copy(hello / "capsule.wasm", project / "capsule.wasm")
    manifest = (hello / "murmur.yaml").read_text()
    manifest = manifest.replace("    source: ./greet\n    local_source: true\n", '    version: "0.1.0"\n')
    assert "source:" not in manifest
    (project / "murmur.yaml").write_text(manifest)

    missing = mur(["run", "--task", "Ada"], cwd=project, home=user, **cache)
    assert missing.code == 1 and missing.err.startswith("error[E-RUN-008]: ")

    assert mur(["install", "greet@0.1.0", "--registry", registry.url], cwd=project, home=user, NEXUS_API_KEY=KEY).code == 0
    (project / "murmur.lock").unlink()  # `mur run` creates it when absent
    run = mur(["run", "--task", "Ada"], cwd=project, home=user, timeout=300, **cache)
    assert run.code == 0, run.err
    assert run.err.splitlines()[-1] == "status:  ok" and run.out == "Hello, Ada!\n"
    [session] = [p for p in (project / "workdir").iterdir() if p.name.startswith("ses_")]
    assert (session / "out" / "result.txt").read_text().strip() == "Hello, Ada!"
    digest = hashlib.sha256(zip_path.read_bytes()).hexdigest()
    assert f"wasm: {digest}" in (project / "murmur.lock").read_text()
    assert not (user / ".murmur" / "artifacts").exists()  # resolved from the project store

    installed = project / ".murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip"
    raw = bytearray(installed.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    installed.write_bytes(bytes(raw))
    tampered = mur(["run", "--task", "Ada"], cwd=project, home=user, **cache)
    assert tampered.code == 1
    assert tampered.err.startswith("error[E-REG-002]: artifact integrity check failed for greet@0.1.0\n")
