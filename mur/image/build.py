"""`mur image build`: the capsule as an OCI image, the one builder `mur deploy --docker` uses too.

    base image (mur-base:bookworm, its layers untouched)
  + one capsule layer written by mur (mur.image.layer): the pinned runtime unpacked under
    /opt/mur/runtime/<id>, the capsule under /capsule (manifest, referenced files, murmur.lock),
    installed artifacts in the capsule user's store, components precompiled into its compile
    cache, the `mur` user (10001), /workdir for the sessions, the entrypoint and the healthcheck
  + an image config mur writes (mur.image.spec), so the image ID is a function of the inputs

The image is handed to the engine with `docker load` (mur.image.archive): no build context, no
build cache, nothing timestamped. Env values are never part of the image.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mur import __version__
from mur.errors import MurError
import mur.image.spec as S
from mur.image.archive import Blob, read_saved, write_archive
from mur.engine.docker import DockerEngine
from mur.engine.images import BaseImage
from mur.image.layer import Layer, extract_runtime
from mur.image.reference import parse_ref
from mur.image.types import QUIET, ImageRef, Reporter
from mur.platform import platform_tag

if TYPE_CHECKING:
    from mur.resolve.shipped import ShippedCapsule

BASE_IMAGE = "mur-base:bookworm"


@dataclass(frozen=True)
class BuildResult:
    image: ImageRef
    unchanged: bool  # the engine already held this exact image: only the tag was set
    labels: dict[str, str]
    layer_diff_id: str
    layer_size: int
    runtime: dict[str, Any]
    base: dict[str, str]
    precompiled: int
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"tag": self.image.tag, "id": self.image.id, "unchanged": self.unchanged,
                "capsule": {"name": self.labels[f"{S.LABEL_PREFIX}capsule.name"],
                            "version": self.labels[f"{S.LABEL_PREFIX}capsule.version"],
                            "digest": self.labels[f"{S.LABEL_PREFIX}capsule.digest"],
                            "lock_digest": self.labels[f"{S.LABEL_PREFIX}lock.digest"]},
                "layer": {"diff_id": f"sha256:{self.layer_diff_id}", "size": self.layer_size},
                "runtime": self.runtime, "base": self.base, "precompiled": self.precompiled,
                "port": int(self.labels[f"{S.LABEL_PREFIX}port"]), "labels": self.labels, "notes": list(self.notes),
                "docker_run": S.run_lines(self.labels[f"{S.LABEL_PREFIX}capsule.name"], self.image.tag,
                                          int(self.labels[f"{S.LABEL_PREFIX}port"]))}


@dataclass
class BuildOptions:
    base_image: str = BASE_IMAGE
    mur_binary: Path | None = None  # an explicit runtime file (else the capsule's pin, built or fetched)
    release_source: str | None = None
    precompile: bool = True
    verify: bool = True  # run `mur --version` in the new image
    full_archive: bool = False  # hand the engine every layer, never a lean archive
    # The user the image runs as. The default is the non-root `mur` user; (0, 0) makes an image whose
    # runtime is root (mur then runs shell tools as other users, with cgroups it creates itself).
    user: tuple[int, int] = (S.UID, S.GID)
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))


def build_image(inputs: ShippedCapsule, tag: str, reporter: Reporter = QUIET, options: BuildOptions | None = None,
                engine: DockerEngine | None = None) -> BuildResult:
    """Build (or find) the image of a shipped capsule (mur.resolve.shipped.ship) and tag it."""
    opts = options or BuildOptions()
    ref = parse_ref(tag)
    tag = str(ref)
    engine = engine or DockerEngine.for_images()
    notes: list[str] = []
    with reporter.step(f"base image {opts.base_image}"):
        base = engine.base(opts.base_image)
    plat = platform_tag(str(base.config.get("Os") or "linux"), str(base.config.get("Architecture") or "amd64"))
    runtime = _runtime(inputs, plat, opts, reporter)
    lock_bytes = _lock(inputs, notes)
    if inputs.needs_subprocess:
        notes.append("this capsule runs shell tools: in a hardened container (non-root, no capabilities, read-only "
                     "cgroups) their aggregate bound is the container's own memory limit, which must be at or below "
                     "capabilities.resources.cgroup_memory_bytes (else E-RUN-012); docs/image.md, 'Shell tools'")
    compiled = _precompiled(inputs, plat, opts, reporter)
    scratch = Path(tempfile.mkdtemp(prefix="mur-image-", dir=_scratch_root()))
    try:
        with reporter.step("capsule layer"):
            layer = Layer()
            ident = _add_runtime(layer, runtime.path, scratch / "runtime")
            _add_capsule(layer, inputs, lock_bytes, compiled, base, opts.user)
            layer_path = scratch / "layer.tar"
            created = S.source_date_epoch(opts.env)
            with open(layer_path, "wb") as fh:
                diff_id = layer.write(fh, created)
        spec = S.ImageSpec(
            name=inputs.name, version=inputs.version, mur_version=runtime.version, runtime_sha256=runtime.sha256, capsule_digest=inputs.digest,
            lock_digest=hashlib.sha256(lock_bytes).hexdigest() if lock_bytes else "",
            base_ref=base.ref, base_id=base.id, base_digest=base.repo_digest, base_config=base.config,
            base_diff_ids=base.diff_ids, layer_diff_id=diff_id, port=inputs.internal_port or S.DEFAULT_PORT,
            created=created, uid=opts.user[0], gid=opts.user[1])
        config = spec.config_bytes()
        image_id = f"sha256:{hashlib.sha256(config).hexdigest()}"
        unchanged = engine.inspect(image_id) is not None
        if not unchanged:
            with reporter.step(f"load {image_id[:19]} into the engine"):
                _load(engine, config, base, layer_path, diff_id, created, scratch, opts.full_archive, reporter)
        try:
            if opts.verify and not unchanged:
                with reporter.step("runtime check inside the image"):
                    _verify(engine, image_id, runtime.version, opts.user)
            engine.tag(image_id, ref.repository, ref.tag)
        except BaseException:
            if not unchanged:  # an image that failed its check (or was interrupted) is not left behind
                engine.remove_image(image_id)
            raise
        return BuildResult(
            image=ImageRef(tag, image_id), unchanged=unchanged, labels=spec.labels(), layer_diff_id=diff_id,
            layer_size=layer_path.stat().st_size,
            runtime={"name": runtime.name, "version": runtime.version, "sha256": runtime.sha256, "id": ident,
                     "origin": runtime.origin},
            base={"ref": base.ref, "id": base.id}, precompiled=len(compiled), notes=tuple(notes))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _scratch_root() -> str:
    """Where the layer is written: next to mur's caches (the layer is as big as the runtime)."""
    from mur.paths import cache_root

    root = cache_root() / "image-build"
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


def _runtime(inputs: ShippedCapsule, plat: str, opts: BuildOptions, reporter: Reporter):
    from mur.runtime import bundle as bundles

    pin = inputs.mur_version or __version__
    with reporter.step(f"mur {pin} runtime for {plat}"):
        if opts.mur_binary:
            return bundles.use_explicit_bundle(Path(opts.mur_binary), pin)
        # as `mur deploy` reads it: the flag, else the capsule project's merged config (ship), which
        # resolve_bundle falls back from to the global one
        source = opts.release_source or inputs.release_source
        return bundles.resolve_bundle(pin, plat, source, reporter.note)


def _lock(inputs: ShippedCapsule, notes: list[str]) -> bytes:
    """The murmur.lock the image carries: the project's (verified), or one pinned now when absent.

    `mur run` writes a missing lock beside the manifest; the image's /capsule is read-only, so the
    lock is made here, from the same digest-verified artifacts the image holds.
    """
    from mur.artifacts import lock as lockfile
    from mur.artifacts.installed import check_lock_for_run

    project = inputs.manifest_path.parent
    path = lockfile.lock_path(project)
    if lockfile.read_lock(path) is not None:
        check_lock_for_run(project, list(inputs.artifacts), create=False)  # verifies only, never writes
        return path.read_bytes()
    if not inputs.artifacts:
        return b""
    fresh = lockfile.MurmurLock()
    for a in inputs.artifacts:
        if fresh.entry(a.name) is None:
            fresh.upsert(a.name, a.version, a.sha256)
    fresh.validate()
    notes.append(f"no murmur.lock beside {inputs.manifest_path.name}: the image carries one pinning "
                 + ", ".join(f"{a.name}@{a.version}" for a in inputs.artifacts))
    return fresh.to_yaml().encode()


def _precompiled(inputs: ShippedCapsule, plat: str, opts: BuildOptions, reporter: Reporter) -> list[Any]:
    from mur.runtime import precompile as pc

    if not opts.precompile:
        return []
    why = pc.supported(plat)
    if why:
        reporter.note(f"components compile when the container starts: {why}")
        return []
    sources = inputs.wasm_sources()
    if not sources:
        return []
    with reporter.step(f"precompile {len(sources)} component(s) for {plat}"):
        return [p.file for p in pc.precompile(sources, plat, reporter)]


def _add_runtime(layer: Layer, bundle: Path, scratch: Path) -> str:
    ident = extract_runtime(bundle, scratch)
    layer.tree(scratch, f"{S.RUNTIME_DIR.strip('/')}/{ident}")
    layer.file("usr/local/bin/mur", data=S.runtime_wrapper(ident), mode=0o755)
    return ident


def _add_capsule(layer: Layer, inputs: ShippedCapsule, lock: bytes, compiled: list[Any], base: BaseImage,
                 user: tuple[int, int]) -> None:
    passwd, group = S.with_user(base.passwd, base.group)
    layer.file("etc/passwd", data=passwd)
    layer.file("etc/group", data=group)
    layer.file(S.ENTRYPOINT, data=S.serve_script(tuple(inputs.run_args)), mode=0o755)
    layer.file(S.HEALTHCHECK, data=S.healthcheck_script(), mode=0o755)
    cap = S.CAPSULE_DIR.strip("/")
    layer.file(f"{cap}/murmur.yaml", src=inputs.manifest.src)
    for f in inputs.files:
        if f.rel == "murmur.lock":
            continue
        layer.file(f"{cap}/{f.rel}", src=f.src, mode=0o755 if f.mode & 0o111 else 0o644)
    if lock:
        layer.file(f"{cap}/murmur.lock", data=lock)
    murmur = f"{S.HOME.strip('/')}/.murmur"
    for a in inputs.artifacts:  # the capsule user's global store, read-only to it
        for f in a.files:
            layer.file(f"{murmur}/artifacts/{a.name}/{a.version}/{f.rel}", src=f.src)
    # The compile cache must be the service user's own, 0700 (mur.wasm.engine refuses it otherwise).
    uid, gid = user
    layer.dir(f"{murmur}/cache/wasm", 0o700, uid, gid)
    layer.symlink(f"{murmur}/cache/payloads", S.PAYLOADS_DIR)  # the root filesystem is read-only
    for f in compiled:
        layer.file(f"{murmur}/cache/wasm/{f.rel}", src=f.src, mode=0o600, uid=uid, gid=gid)
    layer.dir(S.WORKDIR, 0o700, uid, gid)
    layer.symlink(f"{cap}/workdir", S.SESSIONS_DIR)  # the session records: on the volume, beside the tools' workdir


def _load(engine: DockerEngine, config: bytes, base: BaseImage, layer_path: Path, diff_id: str, mtime: int,
          scratch: Path, full: bool, reporter: Reporter) -> None:
    """Hand the image to the engine untagged (it is tagged once it has passed the runtime check)."""
    mine = Blob(diff_id, layer_path.stat().st_size, path=layer_path)
    if not full:
        lean = [Blob(d.split(":", 1)[1], 0) for d in base.diff_ids] + [mine]
        try:
            _load_archive(engine, config, lean, mtime, scratch, lean=True)
            return
        except MurError as exc:
            reporter.note(f"the engine needs every layer ({exc.message.splitlines()[0][:160]}): sending the base too")
    saved_path = scratch / "base.tar"
    with open(saved_path, "wb") as fh:
        for chunk in engine.save(base.id):
            fh.write(chunk)
    saved = read_saved(saved_path)
    try:
        _load_archive(engine, config, saved.layers + [mine], mtime, scratch, lean=False)
    finally:
        saved.close()


def _load_archive(engine: DockerEngine, config: bytes, layers: list[Blob], mtime: int, scratch: Path,
                  lean: bool) -> None:
    path = scratch / ("lean.tar" if lean else "full.tar")
    with open(path, "wb") as fh:
        write_archive(fh, config, layers, [], mtime=mtime, lean=lean)
    try:
        with open(path, "rb") as fh:
            engine.load(fh)
    finally:
        path.unlink(missing_ok=True)


def _verify(engine: DockerEngine, image_id: str, version: str, user: tuple[int, int]) -> None:
    status, out = engine.run(image_id, ["--version"], entrypoint=["/usr/local/bin/mur"], network_mode="none",
                             read_only=True, user=f"{user[0]}:{user[1]}")
    if status != 0 or version not in out:
        raise MurError("E-IMG-001", f"the runtime in the new image does not run (exit {status}): {out.strip()[-400:]}",
                       "the base image may lack what the runtime needs (glibc, libseccomp2); rebuild it with "
                       "images/build-base.sh")
