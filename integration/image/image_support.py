"""Helpers for the image and export integration tests: the mur CLI, a real registry, hardened runs.

Shared with integration/export (its conftest puts this folder on sys.path).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("MUR_CI_CACHE", "/var/cache/mur-ci"))
BASE_IMAGE = "mur-base:bookworm"
RUN = f"mur-test-{uuid.uuid4().hex[:8]}"  # every tag this session makes starts with it


def cache_dir(name: str) -> Path:
    """A cache kept between runs where the machine keeps them (CI: /var/cache/mur-ci), else in /tmp."""
    base = CACHE if os.access(CACHE if CACHE.exists() else CACHE.parent, os.W_OK) else Path(tempfile.gettempdir())
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def mur(*args: str, env: dict[str, str], check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)
    if check and proc.returncode != 0:
        pytest.fail(f"mur {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def mur_json(*args: str, env: dict[str, str]) -> dict[str, Any]:
    return json.loads(mur(*args, "--json", env=env).stdout.strip().splitlines()[-1])


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def copy_capsule(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("workdir", ".murmur", "__pycache__", ".env"))
    return dst


def wait_for(predicate, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def agent_card(port: int) -> dict[str, Any] | None:
    try:
        r = httpx.get(f"http://127.0.0.1:{port}/.well-known/agent-card.json", timeout=2)
        return r.json() if r.status_code == 200 else None
    except httpx.HTTPError:
        return None


# --- a real registry: Debian's docker-registry (distribution 2.8) on loopback ---------------------


class Registry:
    """`docker-registry serve CONFIG` on 127.0.0.1:<free port>, storage in a temp dir; stopped by pid."""

    def __init__(self, root: Path, *, users: dict[str, str] | None = None, read_only: bool = False):
        exe = shutil.which("docker-registry")
        if exe is None:
            pytest.skip("Debian's docker-registry is not installed (.ci/run installs it)")
        self.root, self.port = root, free_port()
        root.mkdir(parents=True, exist_ok=True)
        self.address = f"127.0.0.1:{self.port}"
        storage: dict[str, Any] = {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}}
        if read_only:
            storage["maintenance"] = {"readonly": {"enabled": True}}
        config: dict[str, Any] = {"version": 0.1, "log": {"level": "warn"}, "storage": storage,
                                  "http": {"addr": self.address, "secret": uuid.uuid4().hex}}
        if users:
            import bcrypt

            lines = [f"{u}:{bcrypt.hashpw(p.encode(), bcrypt.gensalt(rounds=4)).decode()}" for u, p in users.items()]
            (root / "htpasswd").write_text("\n".join(lines) + "\n")
            config["auth"] = {"htpasswd": {"realm": "mur-test", "path": str(root / "htpasswd")}}
        (root / "config.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log = open(root / "registry.log", "wb")
        self.proc = subprocess.Popen([exe, "serve", str(root / "config.yml")], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_for(self._up, 30, f"the registry on {self.address}")

    def _up(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"docker-registry exited {self.proc.returncode}: {(self.root / 'registry.log').read_text()[-2000:]}")
        try:
            return httpx.get(f"http://{self.address}/v2/", timeout=1).status_code in (200, 401)
        except httpx.HTTPError:
            return False

    def manifest_digest(self, repo: str, tag: str, auth: tuple[str, str] | None = None) -> str:
        accept = ", ".join(["application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.oci.image.manifest.v1+json"])
        r = httpx.head(f"http://{self.address}/v2/{repo}/manifests/{tag}", headers={"Accept": accept}, auth=auth,
                       timeout=10)
        assert r.status_code == 200, r.status_code
        return r.headers["Docker-Content-Digest"]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def docker_config(directory: Path, registry: str, user: str, password: str) -> Path:
    """A Docker client config holding a login for `registry` (what `docker login` writes)."""
    directory.mkdir(parents=True, exist_ok=True)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    (directory / "config.json").write_text(json.dumps({"auths": {registry: {"auth": token}}}))
    return directory


def tiny_image(client, tag: str, content: bytes = b"tiny\n") -> str:
    """A one-file image with no base (for registry behaviour that does not depend on the image's size)."""
    import hashlib
    import io

    from mur.image.archive import Blob, write_archive
    from mur.image.layer import Layer
    from mur.image.spec import canonical_json

    layer = Layer()
    layer.file("tiny.txt", data=content)
    raw = io.BytesIO()
    diff = layer.write(raw, 0)
    path = Path(tempfile.mkdtemp(prefix="mur-tiny-")) / "layer.tar"
    path.write_bytes(raw.getvalue())
    config = canonical_json({"architecture": "amd64", "os": "linux", "config": {"Labels": {"dev.mur.test": RUN}},
                             "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff}"]}})
    archive = io.BytesIO()
    write_archive(archive, config, [Blob(diff, path.stat().st_size, path=path)], [tag])
    client.images.load(archive.getvalue())
    shutil.rmtree(path.parent, ignore_errors=True)
    return "sha256:" + hashlib.sha256(config).hexdigest()
