"""Image archives: an OCI layout and a `docker load` archive in one tar, checked when read back."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from mur.errors import MurError
from mur.image.archive import Blob, read_saved, write_archive


def layer_file(tmp_path, name: str, content: bytes):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    path = tmp_path / f"{name}.tar"
    path.write_bytes(buf.getvalue())
    return path, hashlib.sha256(buf.getvalue()).hexdigest()


def image(tmp_path):
    (p1, d1), (p2, d2) = layer_file(tmp_path, "base", b"base"), layer_file(tmp_path, "mine", b"mine")
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [f"sha256:{d1}", f"sha256:{d2}"]},
                         "config": {"Labels": {"org.opencontainers.image.title": "hello", "dev.mur.x": "y"}}},
                        sort_keys=True).encode()
    return config, [Blob(d1, p1.stat().st_size, path=p1), Blob(d2, p2.stat().st_size, path=p2)]


def test_full_archive_is_an_oci_layout_and_a_docker_archive(tmp_path):
    config, layers = image(tmp_path)
    out = tmp_path / "img.tar"
    with open(out, "wb") as fh:
        digest = write_archive(fh, config, layers, ["127.0.0.1:5000/hello:0.1.0"])
    with tarfile.open(out) as tar:
        names = tar.getnames()
        read = lambda n: tar.extractfile(n).read()  # noqa: E731
        assert json.loads(read("oci-layout")) == {"imageLayoutVersion": "1.0.0"}
        index = json.loads(read("index.json"))
        entry = index["manifests"][0]
        assert entry["digest"] == digest
        assert entry["annotations"]["io.containerd.image.name"] == "127.0.0.1:5000/hello:0.1.0"
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == "0.1.0"
        manifest = json.loads(read(f"blobs/sha256/{digest.split(':')[1]}"))
        assert manifest["annotations"] == {"org.opencontainers.image.title": "hello"}
        for desc in [manifest["config"], *manifest["layers"]]:  # every blob is where its digest says
            blob = read(f"blobs/sha256/{desc['digest'].split(':')[1]}")
            assert hashlib.sha256(blob).hexdigest() == desc["digest"].split(":")[1] and len(blob) == desc["size"]
        legacy = json.loads(read("manifest.json"))
        assert legacy[0]["RepoTags"] == ["127.0.0.1:5000/hello:0.1.0"]
        assert all(n in names for n in legacy[0]["Layers"] + [legacy[0]["Config"]])
    saved = read_saved(out)
    try:
        assert saved.config == config and [b.digest for b in saved.layers] == [b.digest for b in layers]
        assert saved.image_id == "sha256:" + hashlib.sha256(config).hexdigest()
    finally:
        saved.close()


def test_same_image_same_bytes(tmp_path):
    config, layers = image(tmp_path)
    outs = []
    for _ in range(2):
        buf = io.BytesIO()
        write_archive(buf, config, layers, ["hello:1"])
        outs.append(buf.getvalue())
    assert outs[0] == outs[1]


def test_lean_archive_leaves_out_layers_the_engine_has(tmp_path):
    config, (base, mine) = image(tmp_path)
    buf = io.BytesIO()
    write_archive(buf, config, [Blob(base.digest, 0), mine], [], lean=True)
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
        names = tar.getnames()
        assert f"blobs/sha256/{mine.digest}" in names and f"blobs/sha256/{base.digest}" not in names
        assert json.loads(tar.extractfile("manifest.json").read())[0]["Layers"][0] == f"blobs/sha256/{base.digest}"
    with pytest.raises(ValueError):
        write_archive(io.BytesIO(), config, [Blob(base.digest, 0), mine], [])


def test_damaged_archives_are_refused(tmp_path):
    config, layers = image(tmp_path)
    bad = tmp_path / "bad.tar"
    with open(bad, "wb") as fh:
        write_archive(fh, config, [layers[1], layers[0]], ["x:1"])  # layers out of order: digests disagree
    with pytest.raises(MurError) as err:
        read_saved(bad)
    assert err.value.code == "E-IMG-003" and "does not match its diff_id" in err.value.message
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar")
    with pytest.raises(MurError) as err:
        read_saved(junk)
    assert err.value.code == "E-IMG-003"
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w"):
        pass
    with pytest.raises(MurError) as err:
        read_saved(empty)
    assert err.value.code == "E-IMG-003" and "not a loadable image archive" in err.value.message
