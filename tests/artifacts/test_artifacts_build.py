"""`mur build` properties the golden cases cannot show: determinism, atomic output, zip layout."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from mur.artifacts.build import build_artifact
from mur.errors import MurError, collect_warnings

WASM = b"\0asm\x01\0\0\0" + bytes(range(256)) * 40


def _tool(src: Path) -> Path:
    src.mkdir(parents=True, exist_ok=True)
    (src / "murmur.yaml").write_text(
        'name: greet\nversion: "0.1.0"\nruntime: tool\nrequires_files:\n  - greet.wasm\n  - assets/data.json\n'
    )
    (src / "greet.wasm").write_bytes(WASM)
    (src / "assets").mkdir(exist_ok=True)
    (src / "assets" / "data.json").write_text('{"k": 1}\n')
    return src


def _sha(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_same_inputs_give_same_bytes_whatever_mtimes_and_modes(tmp_path):
    src = _tool(tmp_path / "a")
    first = _sha(build_artifact(str(src)))
    os.utime(src / "greet.wasm", (1_000_000_000, 1_000_000_000))
    os.utime(src / "assets" / "data.json", (2_000_000_000, 2_000_000_000))
    os.chmod(src / "greet.wasm", 0o755)
    second = _sha(build_artifact(str(src)))
    assert first == second

    other = _tool(tmp_path / "b")  # a copy elsewhere, built to an explicit output
    third = _sha(build_artifact(str(other), str(tmp_path / "elsewhere.mur.zip")))
    assert third == first


def test_different_content_gives_different_bytes(tmp_path):
    src = _tool(tmp_path / "a")
    first = _sha(build_artifact(str(src)))
    (src / "assets" / "data.json").write_text('{"k": 2}\n')
    assert _sha(build_artifact(str(src))) != first


def test_zip_layout_is_fixed(tmp_path):
    out = build_artifact(str(_tool(tmp_path / "a")))
    with zipfile.ZipFile(out) as zf:
        infos = zf.infolist()
        assert [i.filename for i in infos] == ["murmur.yaml", "greet.wasm", "assets/data.json"]
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0)
            assert info.compress_type == zipfile.ZIP_DEFLATED
            assert info.external_attr >> 16 == 0o100644
        assert zf.read("greet.wasm") == WASM
        assert zf.testzip() is None


def test_failed_build_leaves_previous_artifact_untouched(tmp_path):
    src = _tool(tmp_path / "a")
    out = build_artifact(str(src))
    before = Path(out).read_bytes()
    (src / "assets" / "data.json").unlink()
    with pytest.raises(MurError) as err:
        build_artifact(str(src))
    assert err.value.code == "E-IO-003"
    assert Path(out).read_bytes() == before
    assert not list(src.glob(".*.tmp"))


def test_unreadable_payload_fails_without_partial_output(tmp_path):
    if os.geteuid() == 0:
        # root reads everything; use a directory entry instead (read fails mid-pack)
        src = _tool(tmp_path / "a")
        (src / "murmur.yaml").write_text(
            'name: greet\nversion: "0.1.0"\nruntime: tool\nrequires_files:\n  - greet.wasm\n  - assets\n'
        )
    else:
        src = _tool(tmp_path / "a")
        os.chmod(src / "assets" / "data.json", 0)
    with pytest.raises(MurError) as err:
        build_artifact(str(src))
    assert err.value.code in ("E-IO-002", "E-IO-003")
    assert not list(src.glob("*.mur.zip")) and not list(src.glob(".*.tmp"))


def test_output_into_missing_directory_is_created(tmp_path):
    out = build_artifact(str(_tool(tmp_path / "a")), str(tmp_path / "dist" / "deep" / "x.mur.zip"))
    assert zipfile.is_zipfile(out)


def test_symlinked_file_is_refused_even_when_target_is_inside(tmp_path):
    src = tmp_path / "a"
    src.mkdir()
    (src / "murmur.yaml").write_text('name: s\nversion: "1"\nruntime: skill\n')
    (src / "real.md").write_text("x")
    os.symlink("real.md", src / "skill.md")
    with pytest.raises(MurError) as err:
        build_artifact(str(src))
    assert err.value.code == "E-BLD-002"


def test_dangling_symlink_reads_as_missing(tmp_path):
    src = tmp_path / "a"
    src.mkdir()
    (src / "murmur.yaml").write_text('name: s\nversion: "1"\nruntime: skill\n')
    os.symlink("nowhere.md", src / "skill.md")
    with pytest.raises(MurError) as err:
        build_artifact(str(src))
    assert err.value.render() == (f"error[E-IO-003]: missing required file 'skill.md' in {src}\n"
                                  f"  hint: add the file, or change requires_files in the artifact's murmur.yaml (docs/artifacts.md)")


def test_warnings_go_through_the_warning_sink(tmp_path):
    src = tmp_path / "a"
    src.mkdir()
    (src / "murmur.yaml").write_text('name: s\nversion: "1"\nruntime: skill\nrequires_files: []\ntoken: abcdefghijkl\n')
    with collect_warnings() as items:
        build_artifact(str(src))
    assert [code for code, _ in items] == ["W-SEC-004"]
    assert items[0][1].startswith("murmur.yaml: field 'token' appears to contain a literal secret value\n")


def test_fifo_entry_fails_instead_of_hanging(tmp_path):
    src = tmp_path / "a"
    src.mkdir()
    (src / "murmur.yaml").write_text('name: s\nversion: "1"\nexecution: static\nrequires_files:\n  - pipe\n')
    os.mkfifo(src / "pipe")  # no writer: a blocking open would wait forever
    with pytest.raises(MurError) as err:
        build_artifact(str(src))
    assert err.value.render() == (
        f"error[E-IO-003]: failed to package file at {os.path.realpath(src)}/pipe: not a regular file"
    )
    assert not list(src.glob("*.mur.zip")) and not list(src.glob(".*.tmp"))
