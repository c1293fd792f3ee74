"""The library side of `mur publish`, `mur install` and `mur list` (upstream `commands/*.rs`).

Every function returns data (lines to print, rows) and raises MurError; the CLI renders.
Publish and install also compile the artifact's component into the engine's cache
(mur.wasm.compile), so the first `mur run` that loads it does not; `compile=False` skips that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur.artifacts import lock as lockfile
from mur.artifacts.package import ArchiveError, read_manifest_bytes
from mur.artifacts.progress import Transfer
from mur.artifacts.refs import BareRef, GitHubRef, LocalFileRef, VersionedRef, parse_ref
from mur.artifacts.registry_client import (
    LocalRegistry,
    RemoteRegistry,
    is_reserved_version,
    reserved_error,
    resolve_registry,
)
from mur.artifacts.store import (
    ArtifactMeta,
    Store,
    global_store,
    integrity_error,
    meta_from_manifest,
    project_store,
    sha256_hex,
    split_platform,
    validate_version_segment,
)
from mur.digits import is_digits
from mur.errors import MurError
from mur.humanize import shown_path
from mur.paths import home_dir
from mur.platform import current_platform
from mur.progress import QUIET, Reporter

MANIFEST_FILENAME = "murmur.yaml"


# --- project root -----------------------------------------------------------------------------


def find_project_root(cwd: Path | None = None) -> Path:
    """Nearest directory at or above cwd holding murmur.yaml (E-IO-001 when there is none)."""
    start = Path(cwd or Path.cwd()).resolve()
    for candidate in (start, *start.parents):
        if (candidate / MANIFEST_FILENAME).exists():
            return candidate
    raise MurError(
        "E-IO-001",
        f"no project root found (no {MANIFEST_FILENAME} in current or parent directories)",
        "use `mur install -g <ref>` to install into the global store instead",
    )


def display_path(path: Path) -> str:
    """`~/...` when under the home directory (mur.paths), else the path."""
    try:
        return "~/" + str(Path(path).relative_to(home_dir()))
    except (MurError, ValueError):  # no home directory, or not under it
        return str(path)


# --- compile ahead of `mur run` -------------------------------------------------------------


def archive_components(data: bytes) -> list[Any]:
    """The component `mur run` loads from `.mur.zip` bytes, as a mur.wasm.compile.Source: its root
    wasm (none for a static or native artifact, nor for an archive refused elsewhere)."""
    from mur.artifacts.package import ArtifactArchive, PayloadShapeError, select_root_wasm
    from mur.wasm.compile import Source

    try:
        archive = ArtifactArchive(data)
        manifest = archive.manifest()
        if manifest.registry_runtime != "wasm":
            return []
        entry = select_root_wasm(archive.names)
        return [Source(f"{manifest.name}@{manifest.version}", data=archive.read(entry))]
    except (ArchiveError, PayloadShapeError, MurError):
        return []  # install and publish judged the archive already; `mur run` reports a bad payload


def compile_archives(archives: list[bytes], reporter: Reporter = QUIET) -> list[Any]:
    """Compile the components of these `.mur.zip` bytes into the engine cache, in parallel."""
    from mur.wasm.compile import ensure_compiled
    from mur.wasm.engine import WasmEngine

    sources = [src for data in archives for src in archive_components(data)]
    return ensure_compiled(sources, engine=WasmEngine(), reporter=reporter) if sources else []


def compile_files(paths: list[Path], reporter: Reporter = QUIET) -> list[Any]:
    """Compile these .wasm files (a capsule dir's built components) into the engine cache, in parallel."""
    from mur.wasm.compile import Source, ensure_compiled
    from mur.wasm.engine import WasmEngine

    if not paths:
        return []
    return ensure_compiled([Source(shown_path(Path(p)), path=Path(p)) for p in paths], engine=WasmEngine(), reporter=reporter)


def compiled_json(compiled: list[Any]) -> list[dict[str, Any]]:
    return [c.to_json() for c in compiled]


# --- publish ----------------------------------------------------------------------------------


def parse_platform(text: str) -> tuple[str, str]:
    pair = split_platform(text)
    if pair is None:
        raise MurError("E-IO-003", f"invalid platform '{text}' (expected os-arch, e.g. darwin-aarch64)",
                       "e.g. linux-x86_64, linux-aarch64, darwin-aarch64")
    return pair


def default_publish_path(cwd: Path) -> Path:
    """`<cwd>/<name>-<version>.mur.zip` from cwd's murmur.yaml (what `mur build` wrote)."""
    from mur.artifacts.build import read_build_manifest

    manifest, _, _ = read_build_manifest(str(cwd))
    inferred = cwd / f"{manifest.name}-{manifest.version}.mur.zip"
    if not inferred.exists():
        raise MurError(
            "E-IO-001",
            f"default artifact path {inferred} not found. Run 'mur build' first or pass an explicit artifact path.",
            "run `mur build` first, or pass the .mur.zip to publish",
        )
    return inferred


@dataclass
class PublishOutcome:
    artifact_id: str
    sha256: str
    registry: str
    notes: list[str] = field(default_factory=list)
    compiled: list[Any] = field(default_factory=list)  # mur.wasm.compile.Compiled

    def to_json(self) -> dict[str, Any]:
        return {"artifact_id": self.artifact_id, "sha256": self.sha256, "registry": self.registry,
                "compiled": compiled_json(self.compiled)}


def publish(
    artifact: str | None,
    *,
    registry: str | None = None,
    platform: str | None = None,
    cwd: Path | None = None,
    transport: Any = None,
    progress: Transfer | None = None,
    compile: bool = True,
    reporter: Reporter = QUIET,
) -> PublishOutcome:
    """Publish a built `.mur.zip` to the local store or a remote registry (upload reported to `progress`),
    then compile its component here (`reporter` hears it) unless `compile` is False."""
    from mur.manifest.artifact import validate_artifact_name

    cwd = Path(cwd or Path.cwd())
    path = Path(artifact) if artifact else default_publish_path(cwd)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read artifact at {path}: {exc.strerror or exc}") from exc
    try:
        manifest, _ = read_manifest_bytes(data)
    except ArchiveError as exc:
        raise MurError("E-IO-003", f"failed to parse murmur.yaml in {path}: {exc}") from exc
    if is_reserved_version(manifest.version):
        raise reserved_error(manifest.version)
    validate_artifact_name(manifest.name)
    validate_version_segment(manifest.version)

    notes: list[str] = []
    if platform is not None:
        runtime, platforms = "native", [parse_platform(platform)]
    elif manifest.registry_runtime == "static":
        runtime, platforms = "static", []
    elif manifest.registry_runtime == "native":
        here = current_platform()
        if here == "unknown":
            raise MurError(
                "E-IO-003",
                "cannot auto-detect platform for native artifact on this host",
                "pass an explicit platform with --platform <PLATFORM> (e.g. darwin-aarch64)",
            )
        notes.append(f"Platform: {here} (auto-detected)")
        runtime, platforms = "native", [parse_platform(here)]
    else:
        runtime, platforms = "wasm", []
    meta = meta_from_manifest(manifest, platforms=platforms)
    meta.runtime = runtime

    target = resolve_registry(registry, cwd=cwd, transport=transport, progress=progress)
    result = target.publish(meta, data)
    where = target.url if isinstance(target, RemoteRegistry) else display_path(global_store())
    compiled = compile_archives([data], reporter) if compile else []
    return PublishOutcome(result.artifact_id, result.sha256, where, notes, compiled)


# --- install ----------------------------------------------------------------------------------


@dataclass
class InstallOutcome:
    name: str
    version: str
    zip_path: Path
    source: str  # registry url, "local", or the file path
    locked: bool
    from_file: bool = False
    compiled: list[Any] = field(default_factory=list)  # mur.wasm.compile.Compiled

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "path": str(self.zip_path), "source": self.source,
                "locked": self.locked, "compiled": compiled_json(self.compiled)}


def _target_store(global_: bool, cwd: Path) -> tuple[Store, Path | None]:
    if global_:
        return Store(global_store()), None
    root = find_project_root(cwd)
    # Not created here: Store.put makes the directories it writes into, so a refused install
    # (unknown artifact, registry down, lock conflict) leaves no empty .murmur/artifacts/ behind.
    return Store(project_store(root)), root


def version_key(version: str) -> tuple:
    """Semver-ish ordering: numeric fields numerically, a pre-release below its release."""
    core, _, _build = version.partition("+")
    main, dash, pre = core.partition("-")

    def fields(text: str) -> tuple:
        return tuple((0, int(p), "") if is_digits(p) else (1, 0, p) for p in re.split(r"[.]", text) if p != "")

    return (fields(main), 0 if dash else 1, fields(pre))


def latest_version(target: LocalRegistry | RemoteRegistry, name: str) -> str:
    versions = [m.version for m in target.list_index() if m.name == name]
    if not versions:
        raise MurError(
            "E-REG-001",
            f"artifact {name} not found in registry",
            f"publish it first (`mur publish`), or install an explicit version with `mur install {name}@<version>`",
        )
    return max(versions, key=version_key)


def install_from_file(path_text: str, store: Store) -> InstallOutcome:
    """A local .mur.zip: stored as-is (never locked: no independent registry hash to pin)."""
    from mur.artifacts.store import install_zip

    try:
        data = Path(path_text).read_bytes()
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read {path_text}: {exc.strerror or exc}") from exc
    try:
        read_manifest_bytes(data)
    except ArchiveError as exc:
        raise MurError("E-IO-003", f"{path_text} is not a valid .mur.zip: {exc}") from exc
    installed = install_zip(store.root, data, platform=current_platform())
    return InstallOutcome(installed.name, installed.version, installed.zip_path, path_text, False, from_file=True)


def install_versioned(
    ref: VersionedRef,
    target: LocalRegistry | RemoteRegistry,
    store: Store,
    project_root: Path | None,
) -> InstallOutcome:
    """Fetch (digest-verified), verify against murmur.lock, store, then upsert the lock."""
    from mur.manifest.artifact import validate_artifact_name

    validate_artifact_name(ref.name)
    validate_version_segment(ref.version)
    here = current_platform()
    fetched = target.fetch(ref.name, ref.version, platform=None if here == "unknown" else here)
    if sha256_hex(fetched.data) != fetched.sha256:
        raise integrity_error(ref.name, ref.version)
    try:
        manifest, _ = read_manifest_bytes(fetched.data)
    except ArchiveError as exc:
        raise MurError("E-IO-003", f"artifact {ref} from {target.url} is not a valid .mur.zip: {exc}") from exc
    if (manifest.name, manifest.version) != (ref.name, ref.version):
        raise MurError(
            "E-IO-003",
            f"artifact {ref} from {target.url} packs a manifest for {manifest.name}@{manifest.version}",
            "the registry serves the wrong bytes for this name@version; republish it",
        )
    meta = fetched.meta
    meta.artifact_runtime = meta.artifact_runtime or manifest.runtime
    if project_root is None:
        (zip_path,) = store.put(meta, fetched.sha256, data=fetched.data, overwrite=True)
        return InstallOutcome(ref.name, ref.version, zip_path, target.url, False)
    path = lockfile.lock_path(project_root)
    with lockfile.project_locked(project_root):
        lock = lockfile.read_lock(path)
        lockfile.check_install_conflict(lock, ref.name, ref.version, fetched.sha256)
        (zip_path,) = store.put(meta, fetched.sha256, data=fetched.data, overwrite=True)
        lock = lock or lockfile.MurmurLock()
        lock.upsert(ref.name, ref.version, fetched.sha256)
        lockfile.write_lock(path, lock)
    return InstallOutcome(ref.name, ref.version, zip_path, target.url, True)


def install(
    ref_text: str,
    *,
    global_: bool = False,
    registry: str | None = None,
    cwd: Path | None = None,
    transport: Any = None,
    progress: Transfer | None = None,
    compile: bool = True,
    reporter: Reporter = QUIET,
) -> InstallOutcome:
    """`mur install REF` (a download reported to `progress`), then its component compiled into the
    engine cache (`reporter` hears it) unless `compile` is False."""
    outcome = _install(ref_text, global_=global_, registry=registry, cwd=cwd, transport=transport, progress=progress)
    if compile:
        outcome.compiled = compile_archives([outcome.zip_path.read_bytes()], reporter)
    return outcome


def _install(ref_text: str, *, global_: bool, registry: str | None, cwd: Path | None, transport: Any,
             progress: Transfer | None) -> InstallOutcome:
    cwd = Path(cwd or Path.cwd())
    ref = parse_ref(ref_text)
    store, project_root = _target_store(global_, cwd)
    if isinstance(ref, LocalFileRef):
        return install_from_file(ref.path, store)
    if isinstance(ref, GitHubRef):
        raise MurError(
            "E-IO-003",
            f"github sources are not available in this mur: cannot install github:{ref.owner}/{ref.repo}@{ref.tag}",
            "download the .mur.zip and `mur install ./<file>.mur.zip`, or publish it to a registry "
            "and `mur install <name>@<version>`",
        )
    target = resolve_registry(registry, cwd=cwd, transport=transport, progress=progress)
    if isinstance(ref, BareRef):
        ref = VersionedRef(ref.name, latest_version(target, ref.name))
    return install_versioned(ref, target, store, project_root)


@dataclass
class ManifestInstallReport:
    total: int
    installed: list[InstallOutcome]
    failures: list[tuple[str, MurError]]
    compiled: list[Any] = field(default_factory=list)  # mur.wasm.compile.Compiled, all installed ones

    def to_json(self) -> dict[str, Any]:
        return {"installed": [{k: v for k, v in o.to_json().items() if k != "compiled"} for o in self.installed],
                "failures": [{"ref": ref, "code": err.code, "message": err.message} for ref, err in self.failures],
                "compiled": compiled_json(self.compiled)}


def install_manifest(
    *, global_: bool = False, registry: str | None = None, cwd: Path | None = None, transport: Any = None,
    progress: Transfer | None = None, compile: bool = True, reporter: Reporter = QUIET,
) -> ManifestInstallReport:
    """`mur install` with no REF: every registry artifact the project's murmur.yaml declares, then
    their components compiled together (in parallel) unless `compile` is False."""
    from mur.manifest.load import load_capsule

    cwd = Path(cwd or Path.cwd())
    root = find_project_root(cwd)
    capsule = load_capsule(root / MANIFEST_FILENAME, resolve_env=False).capsule  # no provider key needed
    wanted = [a for a in capsule.artifacts if not (a.source is not None and a.uses_local_source)]
    report = ManifestInstallReport(len(wanted), [], [])
    if not wanted:
        return report
    store, project_root = _target_store(global_, cwd)
    target = resolve_registry(registry, cwd=cwd, transport=transport, progress=progress)
    for decl in wanted:
        ref = VersionedRef(decl.name, decl.version or "")
        try:
            if not decl.version:
                raise MurError("E-MAN-001", f"murmur.yaml: artifact '{decl.name}' has no version to install")
            report.installed.append(install_versioned(ref, target, store, project_root))
        except MurError as err:
            report.failures.append((str(ref), err))
    if compile and report.installed:
        report.compiled = compile_archives([o.zip_path.read_bytes() for o in report.installed], reporter)
    return report


# --- list -------------------------------------------------------------------------------------


@dataclass
class ListRow:
    scope: str
    meta: ArtifactMeta
    path: Path


def list_rows(*, global_: bool = False, all_: bool = False, cwd: Path | None = None) -> list[ListRow]:
    """Rows for `mur list` (project store in a project, else global; --all: project then global)."""
    cwd = Path(cwd or Path.cwd())
    try:
        project_root: Path | None = find_project_root(cwd)
    except MurError:
        project_root = None
    stores: list[tuple[str, Path]] = []
    if all_:
        if project_root is not None:
            stores.append(("project", project_store(project_root)))
        stores.append(("global", global_store()))
    elif global_ or project_root is None:
        stores.append(("global", global_store()))
    else:
        stores.append(("project", project_store(project_root)))
    rows = []
    for scope, root in stores:
        store = Store(root)
        for meta in store.list_index():
            tag = meta.platform_tags[0] if meta.platform_tags else None
            rows.append(ListRow(scope, meta, store.zip_path(meta.name, meta.version, tag)))
    return rows


def render_table(rows: list[ListRow], *, with_scope: bool) -> str:
    """`NAME  VERSION  RUNTIME  PLATFORMS` (upstream's header; a leading SCOPE column for --all)."""
    headers = (["SCOPE"] if with_scope else []) + ["NAME", "VERSION", "RUNTIME", "PLATFORMS"]
    table = []
    for row in rows:
        platform = ", ".join(row.meta.platform_tags) or "\u2014"
        cells = [row.meta.name, row.meta.version, row.meta.artifact_runtime, platform]
        table.append(([row.scope] if with_scope else []) + cells)
    return align_columns(headers, table)


def align_columns(headers: list[str], table: list[list[str]]) -> str:
    """Rows under `headers`, columns two spaces apart and padded to width; the last one is not padded."""
    widths = [max([len(h), *(len(r[i]) for r in table)]) for i, h in enumerate(headers[:-1])]
    lines = []
    for cells in [headers, *table]:
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths)]
        lines.append("  ".join([*padded, cells[-1]]))
    return "\n".join(lines)


def rows_json(rows: list[ListRow]) -> list[dict[str, Any]]:
    return [
        {
            "scope": r.scope,
            "name": r.meta.name,
            "version": r.meta.version,
            "runtime": r.meta.artifact_runtime,
            "execution": r.meta.runtime,
            "platforms": r.meta.platform_tags,
            "path": str(r.path),
        }
        for r in rows
    ]
