"""Staging copies no payload (the engine compiles a private, content-addressed source), and the
runtime-private payload directory it makes where that cache cannot be used is never lost to another
capsule's sweep: a burst of starts, and a sweep forced into every step of making one."""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest

from mur.manifest.artifact import load_artifact_manifest
from mur.manifest.capsule import ArtifactDecl
from mur.resolve.artifacts import ResolvedArtifact
from mur.session import staging
from mur.session.workdir import create_workdir, plan_workdir

SES = "ses_" + "0" * 31 + "1"
WASM = b"\0asm\x0d\x00\x01\x00" + b"payload" * 1000


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MUR_CACHE_DIR", str(tmp_path / "home" / ".murmur" / "cache"))


def cache() -> Path:
    return Path(os.environ["MUR_CACHE_DIR"])


def workdir(tmp_path: Path, session: str = SES):
    wd = plan_workdir(tmp_path / "capsule", session, None)
    create_workdir(wd)
    return wd


def store_artifact(tmp_path: Path, name: str = "t") -> ResolvedArtifact:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("murmur.yaml", f'name: {name}\nversion: "1.0.0"\nruntime: tool\nrequires_files: [{name}.wasm, data.txt]\n')
        zf.writestr(f"{name}.wasm", WASM)
        zf.writestr("data.txt", "kept beside the manifest")
    path = tmp_path / f"{name}-1.0.0.mur.zip"
    path.write_bytes(buf.getvalue())
    return ResolvedArtifact(ArtifactDecl(name=name, version="1.0.0"), "store", path)


def local_artifact(tmp_path: Path, name: str = "l") -> ResolvedArtifact:
    src = tmp_path / "src" / name
    src.mkdir(parents=True)
    (src / "murmur.yaml").write_text(f'name: {name}\nversion: "0.1.0"\nruntime: tool\nrequires_files: [{name}.wasm]\n')
    (src / f"{name}.wasm").write_bytes(WASM)
    return ResolvedArtifact(ArtifactDecl(name=name, source=str(src), local_source=True), "local", src,
                            manifest=load_artifact_manifest(src))


# --- no payload copied ------------------------------------------------------------------------


def test_a_store_payload_is_kept_once_per_content_and_never_copied_into_the_workdir(tmp_path):
    art = store_artifact(tmp_path)
    staged = staging.stage({"t": art}, [], workdir(tmp_path))
    try:
        tool = staged.tools["t"]
        digest = hashlib.sha256(WASM).hexdigest()
        assert tool.wasm_path == cache() / "wasm" / f"{digest}.wasm"
        assert tool.wasm_path.read_bytes() == WASM
        st = tool.wasm_path.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o400)
        assert sorted(p.name for p in tool.dir.iterdir()) == ["data.txt", "murmur.yaml"]  # not t.wasm
        assert staged.private_dir is None and not (cache() / "payloads").exists()
    finally:
        staged.cleanup()
    again = staging.stage({"t": art}, [], workdir(tmp_path, SES[:-1] + "2"))
    try:  # the same content: the kept file itself, not written again
        assert again.tools["t"].wasm_path.stat().st_ino == st.st_ino
    finally:
        again.cleanup()


def test_a_kept_source_someone_else_could_write_is_replaced(tmp_path):
    art = store_artifact(tmp_path)
    staged = staging.stage({"t": art}, [], workdir(tmp_path))
    kept = staged.tools["t"].wasm_path
    staged.cleanup()
    os.chmod(kept, 0o666)
    kept_ino = kept.stat().st_ino
    again = staging.stage({"t": art}, [], workdir(tmp_path, SES[:-1] + "2"))
    try:
        assert again.tools["t"].wasm_path == kept
        st = kept.stat()
        assert st.st_ino != kept_ino and st.st_mode & 0o777 == 0o400 and kept.read_bytes() == WASM
    finally:
        again.cleanup()


def test_a_local_payload_is_compiled_where_it_is(tmp_path):
    art = local_artifact(tmp_path)
    staged = staging.stage({"l": art}, [], workdir(tmp_path))
    try:
        tool = staged.tools["l"]
        assert tool.wasm_path == art.path / "l.wasm"  # the engine reads and hashes it itself
        assert sorted(p.name for p in tool.dir.iterdir()) == ["murmur.yaml"]
        assert staged.private_dir is None
    finally:
        staged.cleanup()


def test_without_a_private_engine_cache_a_store_payload_goes_to_the_session_private_dir(tmp_path):
    (cache() / "wasm").mkdir(parents=True)
    os.chmod(cache() / "wasm", 0o777)  # not ours alone: the engine neither trusts nor fills it
    staged = staging.stage({"t": store_artifact(tmp_path)}, [], workdir(tmp_path))
    try:
        private = staged.private_dir
        assert private == cache() / "payloads" / SES and (private.stat().st_mode & 0o777) == 0o700
        assert staged.tools["t"].wasm_path == private / "t.wasm" and (private / "t.wasm").read_bytes() == WASM
        assert staging.sweep_payloads(private.parent) == []  # ours is locked
    finally:
        staged.cleanup()
    assert not (cache() / "payloads" / SES).exists()


# --- the private payload directory: sweeps ----------------------------------------------------


def test_sweep_removes_only_payloads_whose_owner_is_gone(tmp_path):
    root = tmp_path / "payloads"
    names = ("ses_dead", "ses_live", "ses_nolock_fresh", "ses_nolock_old", ".new-ses_fresh", ".new-ses_old")
    dirs = {n: root / n for n in names}
    for d in dirs.values():
        d.mkdir(parents=True)
    (dirs["ses_dead"] / staging.LOCK).touch()  # its owner's flock died with it
    held = os.open(dirs["ses_live"] / staging.LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    (dirs[".new-ses_fresh"] / staging.LOCK).touch()  # being made: named only once locked
    stale = time.time() - staging.UNLOCKED_GRACE - 5
    for old in ("ses_nolock_old", ".new-ses_old"):
        os.utime(dirs[old], (stale, stale))
    try:
        assert sorted(staging.sweep_payloads(root)) == [".new-ses_old", "ses_dead", "ses_nolock_old"]
    finally:
        os.close(held)
    assert sorted(p.name for p in root.iterdir()) == [".new-ses_fresh", "ses_live", "ses_nolock_fresh"]


def test_a_sweep_at_every_step_of_making_a_payload_dir_leaves_it_alone(monkeypatch):
    """Another capsule starting at the same moment sweeps between any two steps of this one's
    mkdir / create lock / flock / rename: the directory must survive, locked (it did not: one of
    40 capsules started at once failed with E-IO-003 when a sweep fell between create and flock)."""
    root = staging.payload_root()
    root.mkdir(parents=True)
    steps: list[str] = []
    busy = []

    def sweeping(name, real):
        def step(*args, **kwargs):
            result = real(*args, **kwargs)
            if not busy:
                busy.append(1)
                try:
                    steps.append(name)
                    staging.sweep_payloads(root)  # in this process: flock() conflicts per open file, as between two
                finally:
                    busy.pop()
            return result
        return step

    monkeypatch.setattr(os, "mkdir", sweeping("mkdir", os.mkdir))
    monkeypatch.setattr(os, "open", sweeping("open", os.open))
    monkeypatch.setattr(fcntl, "flock", sweeping("flock", fcntl.flock))
    monkeypatch.setattr(os, "rename", sweeping("rename", os.rename))
    path, fd = staging._private_payload_dir(SES)
    monkeypatch.undo()
    try:
        assert {"mkdir", "open", "flock", "rename"} <= set(steps)
        assert path.is_dir() and (path / staging.LOCK).is_file()
        assert staging.sweep_payloads(root) == [] and path.is_dir()  # still locked by its owner
    finally:
        os.close(fd)
    assert staging.sweep_payloads(root) == [SES]  # the owner is gone: now it goes


BURST = textwrap.dedent("""
    import os, sys, time
    from mur.session import staging
    path, fd = staging._private_payload_dir(sys.argv[1])
    (path / "t.wasm").write_bytes(b"x" * 4096)
    for _ in range(40):  # the others sweep meanwhile
        staging.sweep_payloads(staging.payload_root())
        time.sleep(0.005)
    print("ok" if (path / "t.wasm").read_bytes() == b"x" * 4096 else "lost")
""")


def test_a_burst_of_capsules_starting_at_once_loses_none():
    procs = [subprocess.Popen([sys.executable, "-c", BURST, f"ses_{i:032x}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(24)]
    outcomes = [p.communicate(timeout=120) for p in procs]
    assert [out.strip() for out, _ in outcomes] == ["ok"] * len(procs), [err for _, err in outcomes if err][:1]
    staging.sweep_payloads(staging.payload_root())  # every owner gone: whatever is left goes
    assert list(staging.payload_root().iterdir()) == []


def test_a_cache_that_cannot_be_written_sends_the_payload_to_the_session_private_dir(tmp_path, monkeypatch):
    from mur.wasm import sources

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")  # an image's root filesystem

    monkeypatch.setattr(sources, "keep", read_only)
    staged = staging.stage({"t": store_artifact(tmp_path)}, [], workdir(tmp_path))
    try:
        assert staged.tools["t"].wasm_path == cache() / "payloads" / SES / "t.wasm"
        assert staged.tools["t"].wasm_path.read_bytes() == WASM
    finally:
        staged.cleanup()
