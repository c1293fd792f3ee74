"""Image archives: one tar that is both an OCI image layout and a `docker load` archive.

The same file carries `oci-layout` + `index.json` + `blobs/sha256/...` (what OCI tools read:
skopeo's `oci-archive:`, containerd, `docker load` on engines >= 25) and the legacy
`manifest.json` pointing at the same blobs (what `docker load` on older engines reads), as Docker
25's own `docker save` does. Layers stay uncompressed, so a blob's digest is the layer's diff_id
and nothing is recompressed on the way. Entries are sorted with fixed metadata: saving the same
image twice gives the same bytes.

`lean=True` leaves out layers the engine already has (the base image's): `docker load` on a
graphdriver engine looks a layer up by its chain ID before it opens the file. Engines that need
every blob (the containerd image store) get the full archive instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mur.errors import MurError
from mur.image.spec import canonical_json

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"


@dataclass(frozen=True)
class Blob:
    """A layer: its digest (hex), size, and where its bytes are (None: left out of a lean archive)."""

    digest: str
    size: int
    path: Path | None = None
    member: tuple[tarfile.TarFile, tarfile.TarInfo] | None = None

    def open(self) -> BinaryIO:
        if self.path is not None:
            return open(self.path, "rb")
        assert self.member is not None
        tar, info = self.member
        fh = tar.extractfile(info)
        assert fh is not None
        return fh  # type: ignore[return-value]


def oci_manifest(config: bytes, layers: list[Blob], annotations: dict[str, str]) -> bytes:
    return canonical_json({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": f"sha256:{hashlib.sha256(config).hexdigest()}", "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": f"sha256:{b.digest}", "size": b.size} for b in layers],
        "annotations": dict(sorted(annotations.items())),
    })


def write_archive(out: BinaryIO, config: bytes, layers: list[Blob], tags: list[str], *, mtime: int = 0,
                  lean: bool = False) -> str:
    """Write the archive; returns the OCI manifest digest (`sha256:...`)."""
    cfg_hex = hashlib.sha256(config).hexdigest()
    labels = (json.loads(config).get("config") or {}).get("Labels") or {}
    annotations = {k: v for k, v in labels.items() if k.startswith("org.opencontainers.image.")}
    manifest = oci_manifest(config, layers, annotations)
    man_hex = hashlib.sha256(manifest).hexdigest()
    refs = []
    for tag in tags:
        short = tag.rsplit(":", 1)[1] if ":" in tag.rsplit("/", 1)[-1] else "latest"
        refs.append({"mediaType": MANIFEST, "digest": f"sha256:{man_hex}", "size": len(manifest),
                     "annotations": {"io.containerd.image.name": tag, "org.opencontainers.image.ref.name": short}})
    if not refs:
        refs.append({"mediaType": MANIFEST, "digest": f"sha256:{man_hex}", "size": len(manifest)})
    index = canonical_json({"schemaVersion": 2, "mediaType": INDEX, "manifests": refs})
    legacy = canonical_json([{"Config": f"blobs/sha256/{cfg_hex}", "RepoTags": list(tags),
                              "Layers": [f"blobs/sha256/{b.digest}" for b in layers]}])

    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        def add(name: str, data: bytes | None = None, blob: Blob | None = None) -> None:
            info = tarfile.TarInfo(name)
            info.mtime, info.uname, info.gname = mtime, "", ""
            if data is None and blob is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                return
            info.mode = 0o644
            if blob is not None:
                info.size = blob.size
                with blob.open() as fh:
                    tar.addfile(info, fh)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))

        add("blobs")
        add("blobs/sha256")
        files: dict[str, bytes | Blob] = {cfg_hex: config, man_hex: manifest}
        for b in layers:
            if b.path is not None or b.member is not None:
                files[b.digest] = b
            elif not lean:
                raise ValueError(f"layer {b.digest} has no data for a full archive")
        for hex_ in sorted(files):
            item = files[hex_]
            if isinstance(item, Blob):
                add(f"blobs/sha256/{hex_}", blob=item)
            else:
                add(f"blobs/sha256/{hex_}", item)
        add("index.json", index)
        add("manifest.json", legacy)
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
    return f"sha256:{man_hex}"


@dataclass
class SavedImage:
    """A `docker save` output (any of its formats) opened for reading."""

    tar: tarfile.TarFile
    config: bytes
    layers: list[Blob]
    tags: list[str]

    @property
    def image_id(self) -> str:
        return f"sha256:{hashlib.sha256(self.config).hexdigest()}"

    def close(self) -> None:
        self.tar.close()


def read_saved(path: Path) -> SavedImage:
    """Open an archive from `docker save` (or one of ours); layers checked against the config's diff_ids."""
    try:
        tar = tarfile.open(path, mode="r:")
    except (OSError, tarfile.TarError) as exc:
        raise MurError("E-IMG-003", f"{path} is not an image archive: {exc}") from exc
    try:
        entries = _read_json(tar, "manifest.json")
        if not isinstance(entries, list) or len(entries) != 1:
            raise MurError("E-IMG-003", f"{path} must hold exactly one image (manifest.json has {len(entries) if isinstance(entries, list) else 0})")
        entry = entries[0]
        config = _read(tar, entry["Config"])
        diff_ids = [d.split(":", 1)[1] for d in json.loads(config)["rootfs"]["diff_ids"]]
        if len(diff_ids) != len(entry["Layers"]):
            raise MurError("E-IMG-003", f"{path}: the config lists {len(diff_ids)} layers, the archive {len(entry['Layers'])}")
        layers = []
        for want, name in zip(diff_ids, entry["Layers"]):
            info = tar.getmember(name)
            fh = tar.extractfile(info)
            h = hashlib.sha256()
            for chunk in iter(lambda: fh.read(1 << 20), b""):  # type: ignore[union-attr]
                h.update(chunk)
            if h.hexdigest() != want:
                raise MurError("E-IMG-003", f"{path}: layer {name} does not match its diff_id sha256:{want}",
                               "the archive is damaged, or its layers are compressed (not supported)")
            layers.append(Blob(want, info.size, member=(tar, info)))
        return SavedImage(tar, config, layers, list(entry.get("RepoTags") or []))
    except MurError:
        tar.close()
        raise
    except (KeyError, ValueError, TypeError, tarfile.TarError) as exc:
        tar.close()
        raise MurError("E-IMG-003", f"{path} is not a loadable image archive: {exc}") from exc


def _read(tar: tarfile.TarFile, name: str) -> bytes:
    fh = tar.extractfile(name)
    if fh is None:
        raise KeyError(name)
    return fh.read()


def _read_json(tar: tarfile.TarFile, name: str) -> Any:
    return json.loads(_read(tar, name))
