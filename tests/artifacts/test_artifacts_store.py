"""The on-disk stores: layout, atomic commit, concurrency, tamper detection, listing."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import threading
import zipfile
from pathlib import Path

import pytest

from mur.artifacts.store import (
    ArtifactMeta,
    Store,
    global_store,
    home_dir,
    install_zip,
    project_store,
    sha256_hex,
)
from mur.errors import MurError


def artifact_zip(name: str = "greet", version: str = "0.1.0", runtime: str = "skill", extra: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("murmur.yaml", f'name: {name}\nversion: "{version}"\nruntime: {runtime}\n')
        zf.writestr("skill.md", b"# skill\n" + extra)
    return buf.getvalue()


def meta(name="greet", version="0.1.0", runtime="static", role="skill", platforms=None) -> ArtifactMeta:
    return ArtifactMeta(name, version, runtime, role, list(platforms or []))


def test_home_and_store_paths(isolated, monkeypatch):
    assert home_dir() == isolated / "home"
    assert global_store() == isolated / "home" / ".murmur" / "artifacts"
    assert project_store(Path("/p")) == Path("/p/.murmur/artifacts")
    monkeypatch.delenv("HOME")
    monkeypatch.delenv("USERPROFILE", raising=False)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: (_ for _ in ()).throw(RuntimeError("no home"))))
    with pytest.raises(MurError) as err:
        home_dir()
    assert err.value.code == "E-IO-001"
    assert err.value.message == "could not determine home directory"


def test_put_writes_the_three_files(tmp_path):
    store = Store(tmp_path)
    data = artifact_zip()
    (path,) = store.put(meta(), sha256_hex(data), data=data, overwrite=False)
    d = tmp_path / "greet" / "0.1.0"
    assert path == d / "greet-0.1.0.mur.zip"
    assert path.read_bytes() == data
    assert (d / "greet-0.1.0.sha256").read_text() == sha256_hex(data)
    doc = json.loads((d / "greet-0.1.0.meta.json").read_text())
    assert doc["meta"]["runtime"] == "static" and doc["meta"]["artifact_runtime"] == "skill"
    assert sorted(p.name for p in d.iterdir() if not p.name.startswith(".")) == [
        "greet-0.1.0.meta.json",
        "greet-0.1.0.mur.zip",
        "greet-0.1.0.sha256",
    ]


def test_publish_refuses_existing_install_overwrites(tmp_path):
    store = Store(tmp_path)
    first, second = artifact_zip(), artifact_zip(extra=b"v2")
    store.put(meta(), sha256_hex(first), data=first, overwrite=False)
    with pytest.raises(MurError) as err:
        store.put(meta(), sha256_hex(second), data=second, overwrite=False)
    assert err.value.render() == (
        "error[E-REG-003]: artifact greet@0.1.0 already exists in registry\n"
        "  hint: use a new version string, or `mur unpublish greet@0.1.0` removes the existing one"
    )
    assert store.lookup("greet", "0.1.0").read_verified() == first
    store.put(meta(), sha256_hex(second), data=second, overwrite=True)
    assert store.lookup("greet", "0.1.0").read_verified() == second


def test_tampered_zip_is_refused(tmp_path):
    store = Store(tmp_path)
    data = artifact_zip()
    (path,) = store.put(meta(), sha256_hex(data), data=data, overwrite=True)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(MurError) as err:
        store.lookup("greet", "0.1.0").read_verified()
    assert err.value.code == "E-REG-002"
    assert err.value.message == "artifact integrity check failed for greet@0.1.0"


def test_half_written_set_is_not_an_artifact(tmp_path):
    """What a crash between the sidecar and the zip rename leaves behind is invisible."""
    store = Store(tmp_path)
    d = tmp_path / "greet" / "0.1.0"
    d.mkdir(parents=True)
    (d / "greet-0.1.0.sha256").write_text("ab" * 32)
    (d / ".greet-0.1.0.mur.zip.deadbeef.tmp").write_bytes(b"partial")
    assert store.lookup("greet", "0.1.0") is None
    assert store.list_index() == []
    data = artifact_zip()
    store.put(meta(), sha256_hex(data), data=data, overwrite=False)  # not a conflict
    assert store.lookup("greet", "0.1.0").read_verified() == data


def _publish_worker(root: str, data: bytes, results) -> None:
    try:
        Store(Path(root)).put(meta(), sha256_hex(data), data=data, overwrite=False)
        results.put("ok")
    except MurError as err:
        results.put(err.code)


def test_concurrent_publishes_across_processes_leave_exactly_one(tmp_path):
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    payloads = [artifact_zip(extra=str(i).encode()) for i in range(6)]
    procs = [ctx.Process(target=_publish_worker, args=(str(tmp_path), p, results)) for p in payloads]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    outcomes = sorted(results.get(timeout=5) for _ in procs)
    assert outcomes == ["E-REG-003"] * 5 + ["ok"]
    stored = Store(tmp_path).lookup("greet", "0.1.0")
    assert stored.read_verified() in payloads  # the zip and its sidecar agree
    d = tmp_path / "greet" / "0.1.0"
    assert not [p for p in d.iterdir() if p.name.endswith(".tmp")]


def test_concurrent_publishes_across_threads_leave_exactly_one(tmp_path):
    store = Store(tmp_path)
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        data = artifact_zip(extra=str(i).encode())
        barrier.wait()
        try:
            store.put(meta(), sha256_hex(data), data=data, overwrite=False)
            outcomes.append("ok")
        except MurError as err:
            outcomes.append(err.code)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["E-REG-003"] * 7 + ["ok"]


def test_platform_variants_and_fallback(tmp_path):
    store = Store(tmp_path)
    generic, native = artifact_zip(), artifact_zip(extra=b"native")
    store.put(meta(runtime="native", role="tool", platforms=[("linux", "x86_64")]), sha256_hex(native), data=native, overwrite=False)
    assert (tmp_path / "greet/0.1.0/greet-0.1.0-linux-x86_64.mur.zip").is_file()
    assert store.lookup("greet", "0.1.0") is None  # no generic payload
    assert store.lookup("greet", "0.1.0", "linux-x86_64").platform == "linux-x86_64"
    assert store.lookup("greet", "0.1.0", "darwin-aarch64") is None
    store.put(meta(), sha256_hex(generic), data=generic, overwrite=False)
    fallback = store.lookup("greet", "0.1.0", "darwin-aarch64")
    assert fallback.platform is None and fallback.read_verified() == generic
    (row,) = store.list_index()
    assert row.platforms == [("linux", "x86_64")]


def test_list_index_sorted_and_derives_missing_meta(tmp_path):
    store = Store(tmp_path)
    for name, version in (("zeta", "1.0.0"), ("alpha", "0.2.0"), ("alpha", "0.1.0")):
        data = artifact_zip(name, version)
        store.put(meta(name, version), sha256_hex(data), data=data, overwrite=False)
    (tmp_path / "alpha/0.1.0/alpha-0.1.0.meta.json").unlink()
    rows = store.list_index()
    assert [(r.name, r.version) for r in rows] == [("alpha", "0.1.0"), ("alpha", "0.2.0"), ("zeta", "1.0.0")]
    assert rows[0].runtime == "static" and rows[0].artifact_runtime == "skill"


@pytest.mark.parametrize("version", ["../x", "a/b", "", ".hidden", "..", " 1"])
def test_versions_that_are_not_one_path_segment_are_refused(tmp_path, version):
    with pytest.raises(MurError) as err:
        Store(tmp_path).zip_path("greet", version)
    assert err.value.code == "E-IO-003"


def test_install_zip_scope_and_manifest(isolated):
    data = artifact_zip()
    inst = install_zip(global_store(), data)
    assert inst.scope == "global" and inst.sha256 == sha256_hex(data)
    assert inst.manifest.name == "greet" and inst.manifest.runtime == "skill"
    proj = install_zip(project_store(isolated / "work"), data)
    assert proj.scope == "project"
    assert proj.zip_path == isolated / "work/.murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip"
    with pytest.raises(MurError) as err:
        install_zip(global_store(), b"garbage")
    assert err.value.code == "E-IO-003"
    assert err.value.message.startswith("artifact bytes are not a valid .mur.zip: invalid artifact archive")
    bad = artifact_zip(name="Bad")
    with pytest.raises(MurError) as err:
        install_zip(global_store(), bad)
    assert err.value.code == "E-BLD-001"
    assert not (isolated / "home/.murmur/artifacts/Bad").exists()


def test_stale_temp_files_are_cleaned_on_next_write(tmp_path):
    store = Store(tmp_path)
    d = tmp_path / "greet" / "0.1.0"
    d.mkdir(parents=True)
    stale = d / ".greet-0.1.0.mur.zip.old.tmp"
    stale.write_bytes(b"x")
    os.utime(stale, (1, 1))
    data = artifact_zip()
    store.put(meta(), sha256_hex(data), data=data, overwrite=False)
    assert not stale.exists()
