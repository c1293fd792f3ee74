"""The pinned runtime: release sources (folder and loopback HTTP), verification, cache, build command."""

from __future__ import annotations

import hashlib
import os
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mur import __version__
from mur.runtime import bundle as B
from mur.platform import current_platform
from mur.errors import MurError

PLAT = "linux-x86_64"


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


def make_release(d: Path, version: str = "9.9.9", content: bytes = b"#!/bin/sh\necho mur 9.9.9\n",
                 checksum: str | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    name = f"mur-{version}-{PLAT}"
    (d / name).write_bytes(content)
    digest = checksum or hashlib.sha256(content).hexdigest()
    (d / "checksums.txt").write_text(f"{'0' * 64}  mur-{version}-darwin-aarch64\n{digest}  {name}\n")
    return d


@pytest.fixture
def http_source(tmp_path):
    root = make_release(tmp_path / "www")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()


def test_parse_checksums():
    text = f"{'a' * 64}  mur-1-linux-x86_64\n{'b' * 64} *dist/mur-1-darwin\nnot a line\n# c\n"
    assert B.parse_checksums(text) == {"mur-1-linux-x86_64": "a" * 64, "mur-1-darwin": "b" * 64}


def test_folder_source_is_verified_cached_executable_and_reused(home, tmp_path):
    src = make_release(tmp_path / "rel")
    b = B.fetch_release("9.9.9", PLAT, str(src))
    assert b.path == home / ".murmur" / "bin" / f"mur-9.9.9-{PLAT}" and b.origin == "release"
    assert os.stat(b.path).st_mode & 0o777 == 0o755
    assert b.sha256 == hashlib.sha256(b.path.read_bytes()).hexdigest()
    (src / f"mur-9.9.9-{PLAT}").unlink()  # the cache is used; the source is not read again
    assert B.fetch_release("9.9.9", PLAT, str(src)).origin == "cache"


def test_http_source_on_loopback(home, http_source):
    url, _root = http_source
    b = B.resolve_bundle("9.9.9", PLAT, release_source=url)
    assert b.origin == "release" and b.path.read_bytes().startswith(b"#!/bin/sh")


def test_tampered_file_is_refused_and_not_cached(home, tmp_path):
    src = make_release(tmp_path / "rel", checksum="f" * 64)
    with pytest.raises(MurError) as err:
        B.fetch_release("9.9.9", PLAT, str(src))
    assert err.value.code == "E-DEPLOY-006" and "fails verification" in err.value.message
    assert not (home / ".murmur" / "bin" / f"mur-9.9.9-{PLAT}").exists()
    assert not [p for p in (home / ".murmur" / "bin").iterdir() if p.name.endswith(".part")]


def test_missing_entry_and_missing_source(home, tmp_path):
    src = make_release(tmp_path / "rel")
    with pytest.raises(MurError) as err:
        B.fetch_release("1.2.3", PLAT, str(src))
    assert err.value.code == "E-DEPLOY-006" and "no entry for mur-1.2.3" in err.value.message
    with pytest.raises(MurError) as err:
        B.resolve_bundle("1.2.3", PLAT, release_source=None)
    assert err.value.code == "E-DEPLOY-006" and "--release-source" in err.value.hint


def test_plain_http_is_loopback_only(home):
    with pytest.raises(MurError) as err:
        B.fetch_release("9.9.9", PLAT, "http://releases.example.com/mur")
    assert err.value.code == "E-DEPLOY-006" and "https" in err.value.hint


def test_http_errors_are_deploy_006(home, http_source):
    url, root = http_source
    (root / "checksums.txt").unlink()
    with pytest.raises(MurError) as err:
        B.fetch_release("9.9.9", PLAT, url)
    assert err.value.code == "E-DEPLOY-006" and "HTTP 404" in err.value.message


def test_configured_release_source(home, tmp_path):
    (home / ".murmur").mkdir()
    src = make_release(tmp_path / "rel")
    (home / ".murmur" / "config.yaml").write_text(f"deploy:\n  release_source: {src}\n")
    assert B.configured_release_source() == str(src)


def test_pyinstaller_command_bundles_what_the_runtime_loads_by_name(tmp_path):
    cmd = B.pyinstaller_command(tmp_path / "entry.py", "mur-x", tmp_path / "dist", tmp_path)
    joined = " ".join(cmd)
    assert "--onedir" in cmd and "--collect-submodules mur" in joined and "--collect-data mur" in joined
    assert "--hidden-import pyseccomp" in joined  # imported with __import__ by the sandbox
    assert "_libwasmtime" in joined  # ctypes-loaded, missed by --collect-all's lib*.so pattern
    assert "--exclude-module paramiko" in joined and "--exclude-module docker" in joined


def test_source_digest_is_stable():
    assert B.source_digest() == B.source_digest()


def test_installed_runtime_wrapper(home):
    b = B.installed_runtime()
    assert b.origin == "installed" and b.version == __version__ and b.name.endswith("-py")
    assert os.access(b.path, os.X_OK) and "-m mur" in b.path.read_text()


def test_explicit_binary_gets_a_content_addressed_name(home, tmp_path):
    f = tmp_path / "mymur"
    f.write_bytes(b"custom")
    b = B.use_explicit_bundle(f, "0.1.0")
    assert b.name.startswith(f"mur-0.1.0-{current_platform()}-custom-") and b.path.read_bytes() == b"custom"
    with pytest.raises(MurError) as err:
        B.use_explicit_bundle(tmp_path / "nope")
    assert err.value.code == "E-IO-001"
