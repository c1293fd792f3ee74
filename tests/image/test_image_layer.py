"""The capsule layer: the same inputs give the same bytes, whatever the files' own metadata says."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from mur.runtime.bundle import assemble
from mur.errors import MurError
from mur.image.layer import Layer, extract_runtime, runtime_ident


def tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "sub" / "run.sh", 0o700)
    os.chmod(root / "a.txt", 0o600)
    os.symlink("a.txt", root / "link")
    return root


def written(layer: Layer, mtime: int = 0) -> tuple[bytes, str]:
    buf = io.BytesIO()
    digest = layer.write(buf, mtime)
    return buf.getvalue(), digest


def test_same_inputs_same_digest_whatever_mtimes_and_modes(tmp_path):
    root = tree(tmp_path / "one")
    first = Layer()
    first.tree(root, "opt/x")
    data, digest = written(first)
    assert digest == hashlib.sha256(data).hexdigest()
    os.utime(root / "a.txt", (1_000_000, 1_000_000))  # touching files changes nothing
    os.chmod(root / "a.txt", 0o640)
    again = Layer()
    again.tree(root, "opt/x")
    assert written(again)[1] == digest
    (root / "a.txt").write_text("alphA\n")  # one byte does
    changed = Layer()
    changed.tree(root, "opt/x")
    assert written(changed)[1] != digest


def test_entries_sorted_parents_first_with_fixed_metadata(tmp_path):
    layer = Layer()
    layer.file("capsule/z.txt", data=b"z")
    layer.tree(tree(tmp_path / "t"), "capsule/t")
    layer.dir("workdir", 0o700, 10001, 10001)
    layer.file("home/mur/.murmur/cache/wasm/x.cwasm", data=b"x", mode=0o600, uid=10001, gid=10001)
    data, _ = written(layer, mtime=42)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    for i, name in enumerate(names):  # every parent comes before its children
        parent = name.rsplit("/", 1)[0]
        assert "/" not in name or parent in names[:i], name
    by = {m.name: m for m in members}
    assert all(m.mtime == 42 and m.uname == "" and m.gname == "" for m in members)
    assert by["capsule/t/sub/run.sh"].mode == 0o755 and by["capsule/t/a.txt"].mode == 0o644
    assert by["capsule/t/link"].issym() and by["capsule/t/link"].linkname == "a.txt"
    assert (by["workdir"].mode, by["workdir"].uid) == (0o700, 10001)
    assert by["home"].uid == 0 and by["home/mur/.murmur/cache/wasm/x.cwasm"].mode == 0o600


def test_bad_paths_are_refused():
    layer = Layer()
    for bad in ("", "a/../b", "a//b", "./a"):
        with pytest.raises(ValueError):
            layer.file(bad, data=b"")


def test_runtime_payload_unpacks_like_the_bundle_itself(tmp_path):
    onedir = tmp_path / "onedir"
    (onedir / "_internal").mkdir(parents=True)
    (onedir / "mur").write_text("#!/bin/sh\necho mur 9.9.9\n")
    os.chmod(onedir / "mur", 0o755)
    (onedir / "_internal" / "lib.so").write_bytes(b"\x7fELF fake")
    bundle = assemble(onedir, tmp_path / "mur-9.9.9-linux-x86_64", "9.9.9", "linux-x86_64")
    ident, _ = runtime_ident(bundle)
    mine = tmp_path / "mine"
    assert extract_runtime(bundle, mine) == ident
    # the bundle's own self-extraction puts the same files in the same place
    env = {"PATH": os.environ["PATH"], "MUR_RUNTIME_DIR": str(tmp_path / "rt")}
    out = subprocess.run(["sh", str(bundle)], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "mur 9.9.9"
    theirs = tmp_path / "rt" / ident
    listing = lambda d: sorted(p.relative_to(d).as_posix() for p in d.rglob("*"))  # noqa: E731
    assert listing(mine) == listing(theirs)
    assert (mine / "_internal" / "lib.so").read_bytes() == b"\x7fELF fake"


def test_a_file_that_is_not_a_bundle_is_refused(tmp_path):
    fake = tmp_path / "mur"
    fake.write_text("#!/bin/sh\necho hi\n")
    with pytest.raises(MurError) as err:
        runtime_ident(fake)
    assert err.value.code == "E-DEPLOY-006" and "self-extracting" in err.value.message


def _bundle_with(tmp_path: Path, members) -> Path:
    """A runtime file whose payload holds `members` [(TarInfo, bytes | None)] (a crafted, hostile tar)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    head = b"#!/bin/sh\nid=mur-9-x\ntail -c +%010d \"$0\"\n"
    header = head % (len(head % 0) + 1)
    path = tmp_path / "mur-crafted"
    path.write_bytes(header + buf.getvalue())
    return path


def _member(name: str, kind=tarfile.REGTYPE, linkname: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    return info


@pytest.mark.parametrize("members", [
    [(_member("../escape"), b"x")],
    [(_member("/etc/escape"), b"x")],
    [(_member("up", tarfile.SYMTYPE, ".."), None), (_member("up/escape"), b"x")],
    [(_member("abs", tarfile.SYMTYPE, "/etc"), None)],
    [(_member("d", tarfile.DIRTYPE, mode=0o755), None), (_member("d/up", tarfile.SYMTYPE, "../.."), None)],
    [(_member("hard", tarfile.LNKTYPE, "../outside"), None)],
    [(_member("dev", tarfile.CHRTYPE), None)],
], ids=["dotdot", "absolute", "through-a-symlink", "absolute-symlink", "symlink-up", "hardlink-out", "device"])
def test_a_payload_leaving_its_directory_is_refused(tmp_path, members):
    (tmp_path / "outside").write_text("keep\n")
    bundle = _bundle_with(tmp_path, members)
    dest = tmp_path / "box" / "dest"
    with pytest.raises(MurError) as err:
        extract_runtime(bundle, dest)
    assert err.value.code == "E-DEPLOY-006" and "refusing" in err.value.message
    assert not (tmp_path / "escape").exists() and not (tmp_path / "box" / "escape").exists()
    assert (tmp_path / "outside").read_text() == "keep\n"


def test_a_payload_with_links_inside_unpacks_with_plain_modes(tmp_path):
    bundle = _bundle_with(tmp_path, [
        (_member("mur", mode=0o4755), b"#!/bin/sh\n"),
        (_member("_internal", tarfile.DIRTYPE, mode=0o777), None),
        (_member("_internal/lib.so.1", mode=0o600), b"ELF"),
        (_member("_internal/lib.so", tarfile.SYMTYPE, "lib.so.1"), None),
        (_member("_internal/copy.so", tarfile.LNKTYPE, "_internal/lib.so.1"), None),
    ])
    dest = tmp_path / "dest"
    assert extract_runtime(bundle, dest) == "mur-9-x"
    assert (dest / "mur").stat().st_mode & 0o7777 == 0o755  # no setuid
    assert (dest / "_internal" / "lib.so.1").stat().st_mode & 0o777 == 0o644
    assert os.readlink(dest / "_internal" / "lib.so") == "lib.so.1"
    assert (dest / "_internal" / "copy.so").read_bytes() == b"ELF"
