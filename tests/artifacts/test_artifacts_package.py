"""Reading .mur.zip safely: zip-slip guard, decompression ceiling, payload selection."""

from __future__ import annotations

import io
import zipfile

import pytest

from mur.artifacts.package import (
    ArchiveError,
    ArtifactArchive,
    PayloadShapeError,
    UnsafeEntryPath,
    is_root_wasm_candidate,
    read_manifest_bytes,
    sanitize_entry_path,
    select_root_wasm,
)


def make_zip(files: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


MANIFEST = b'name: demo\nversion: "0.1.0"\nruntime: tool\n'


def test_sanitize_strips_leading_slash_and_refuses_parent_dirs():
    assert sanitize_entry_path("/capsule.wasm") == "capsule.wasm"
    assert sanitize_entry_path("tools/echo/murmur.yaml") == "tools/echo/murmur.yaml"
    for bad in ("../../evil.wasm", "sub/../../evil.wasm", ".."):
        with pytest.raises(UnsafeEntryPath) as err:
            sanitize_entry_path(bad)
        assert str(err.value) == f"zip entry '{bad}' has an unsafe path: contains a '..' component"


def test_root_wasm_candidates():
    assert is_root_wasm_candidate("capsule.wasm")
    assert not is_root_wasm_candidate("sub/capsule.wasm")
    assert not is_root_wasm_candidate("/capsule.wasm")
    assert not is_root_wasm_candidate("capsule.wat")


def test_payload_selection_rule():
    assert select_root_wasm(["tool.wasm", "capsule.wasm", "other.wasm"]) == "capsule.wasm"
    assert select_root_wasm(["murmur.yaml", "tool.wasm", "sub/x.wasm"]) == "tool.wasm"
    with pytest.raises(PayloadShapeError, match=r"^missing root \.wasm file \(expected capsule\.wasm or one root \*\.wasm\)$"):
        select_root_wasm(["murmur.yaml", "sub/capsule.wasm", "../../evil.wasm", "/capsule.wasm"])
    with pytest.raises(PayloadShapeError, match="^multiple root .wasm files found: alpha.wasm, mid.wasm, zeta.wasm$"):
        select_root_wasm(["zeta.wasm", "alpha.wasm", "murmur.yaml", "mid.wasm"])


def test_extract_refuses_zip_slip(tmp_path):
    data = make_zip({"murmur.yaml": MANIFEST, "../escape.txt": b"x"})
    with pytest.raises(UnsafeEntryPath):
        ArtifactArchive(data).extract_all(tmp_path / "dest")
    assert not (tmp_path / "escape.txt").exists()

    data = make_zip({"murmur.yaml": MANIFEST, "/etc/evil": b"x"})
    with pytest.raises(UnsafeEntryPath, match="absolute path component"):
        ArtifactArchive(data).extract_all(tmp_path / "dest2")


def test_extract_never_follows_a_planted_symlink(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "bin").symlink_to(tmp_path)  # pre-existing hostile layout
    data = make_zip({"murmur.yaml": MANIFEST, "bin/tool": b"x"})
    with pytest.raises(ArchiveError):
        ArtifactArchive(data).extract_all(dest)
    assert not (tmp_path / "tool").exists()


def test_extract_writes_nested_files(tmp_path):
    data = make_zip({"murmur.yaml": MANIFEST, "tool.wasm": b"\0asm", "assets/a/b.txt": b"hi"})
    written = ArtifactArchive(data).extract_all(tmp_path / "d")
    assert written == ["murmur.yaml", "tool.wasm", "assets/a/b.txt"]
    assert (tmp_path / "d/assets/a/b.txt").read_bytes() == b"hi"


def test_decompression_ceiling(monkeypatch, tmp_path):
    data = make_zip({"murmur.yaml": MANIFEST, "big.bin": b"\0" * 4096})
    monkeypatch.setenv("MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES", "1024")
    archive = ArtifactArchive(data)
    with pytest.raises(ArchiveError, match=r"^zip entry 'big.bin' exceeds the 1024-byte decompression ceiling$"):
        archive.read("big.bin")
    with pytest.raises(ArchiveError, match="decompression ceiling"):
        archive.extract_all(tmp_path / "d")
    monkeypatch.setenv("MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES", "not-a-number")
    assert len(ArtifactArchive(data).read("big.bin")) == 4096


def test_a_lying_central_directory_cannot_inflate_past_it():
    data = bytearray(make_zip({"murmur.yaml": MANIFEST, "bomb.bin": b"\0" * 100_000}))
    # Claim the entry is 10 bytes (uncompressed size in the central directory record).
    cd = data.rindex(b"PK\x01\x02")
    data[cd + 24 : cd + 28] = (10).to_bytes(4, "little")
    with pytest.raises(ArchiveError):
        ArtifactArchive(bytes(data)).read("bomb.bin")


def test_manifest_errors_read_like_upstream():
    with pytest.raises(ArchiveError, match="^artifact missing required file murmur.yaml$"):
        read_manifest_bytes(make_zip({"manifest.yaml": MANIFEST}))
    with pytest.raises(ArchiveError, match="^invalid artifact archive at <bytes>: "):
        read_manifest_bytes(b"not a zip at all")
    with pytest.raises(ArchiveError, match="^murmur.yaml: missing required field 'version'$"):
        read_manifest_bytes(make_zip({"murmur.yaml": b"name: demo\n"}))
    with pytest.raises(ArchiveError, match="duplicate entry 'murmur.yaml'"):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("murmur.yaml", MANIFEST)
            with pytest.warns(UserWarning):
                zf.writestr("murmur.yaml", b'name: other\nversion: "9"\n')
        ArtifactArchive(buf.getvalue())


def test_crc_corruption_is_an_archive_error():
    data = bytearray(make_zip({"murmur.yaml": MANIFEST, "payload.bin": b"A" * 1000}, compression=zipfile.ZIP_STORED))
    idx = data.index(b"A" * 1000)
    data[idx + 10] ^= 0xFF
    with pytest.raises(ArchiveError, match="Bad CRC-32"):
        ArtifactArchive(bytes(data)).read("payload.bin")
