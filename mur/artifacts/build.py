"""`mur build`: pack `murmur.yaml` plus exactly the declared `requires_files` into a `.mur.zip`.

The order of checks and every message follow upstream (`build.rs`, `commands/build.rs`):

1. read + parse `<source>/murmur.yaml` (E-IO-001 not found, E-MAN-*),
2. W-SEC-004 for literal secrets,
3. plan: name rule (E-BLD-001); per `requires_files` entry in declared order: absolute / `..`
   (E-BLD-002), missing (E-IO-003 "missing required file"), symlink (E-BLD-002); then archive-name
   collisions (E-BLD-002),
4. W-BLD-001..003 over the plan,
5. output must end in `.mur.zip` (E-IO-003), wasm payload shape (E-BLD-003),
6. write.

Nothing is written before step 6, and step 6 writes a temp file beside the output and renames it,
so a failed build never leaves a half artifact. The zip is deterministic: entries in declared
order (manifest first), timestamps fixed at 1980-01-01 00:00, mode 0644, Deflate at the default
level — the same inputs give the same bytes whatever their mtimes or modes.

Deliberate departures from upstream, all stricter or tidier and documented in docs/artifacts.md:
a `requires_files` path that walks through a symlinked *directory* is refused like a symlinked file
(upstream checks only the last component); `\\` counts as a separator for the absolute and `..`
checks, as it does for the archive name (upstream would pack `..\\x` as the zip-slip entry `../x`);
a FIFO entry fails instead of blocking; and archive names drop `./` segments (upstream would pack
`./tool.wasm` verbatim and then fail to find a root wasm).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Any, Callable

from mur.artifacts.package import PayloadShapeError, select_root_wasm
from mur.errors import MurError, warn
from mur.fsutil import DISK_FULL, fsync_dir, writing
from mur.manifest.yamlio import one_line

MANIFEST_FILENAME = "murmur.yaml"
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o100644


@dataclass(frozen=True)
class PackedEntry:
    declared: str
    source_path: str
    archive_name: str


@dataclass(frozen=True)
class ShadowedDeclaration:
    declared: str
    archive_name: str


@dataclass(frozen=True)
class BuildPlan:
    manifest: Any  # ArtifactManifest
    entries: tuple[PackedEntry, ...]
    shadowed: tuple[ShadowedDeclaration, ...]


# --- I/O error texts in upstream's shape ("<strerror> (os error N)") ---------------------------


def os_error_text(exc: OSError) -> str:
    """Rust's io::Error Display for an OSError."""
    if exc.errno is not None and exc.strerror:
        return f"{exc.strerror} (os error {exc.errno})"
    return str(exc)


def _io_error(prefix: str, path: str, exc: OSError) -> MurError:
    code = "E-IO-003"
    if isinstance(exc, FileNotFoundError):
        code = "E-IO-001"
    elif isinstance(exc, PermissionError):
        code = "E-IO-002"
    return MurError(code, f"{prefix} at {path}: {os_error_text(exc)}")


# --- manifest ---------------------------------------------------------------------------------


def read_build_manifest(source: str) -> tuple[Any, Any, str]:
    """(ArtifactManifest, parsed YAML root, manifest path) for `<source>/murmur.yaml`."""
    from mur.manifest.artifact import parse_artifact_manifest
    from mur.manifest.yamlio import naming_file, parse_yaml

    path = os.path.join(source, MANIFEST_FILENAME)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"{MANIFEST_FILENAME} not found at {path}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read {MANIFEST_FILENAME} at {path}: {os_error_text(exc)}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MurError(
            "E-IO-003", f"failed to read {MANIFEST_FILENAME} at {path}: stream did not contain valid UTF-8"
        ) from exc
    try:
        manifest = parse_artifact_manifest(text)  # explicit nulls are wrong types there, as upstream
    except MurError as err:
        raise naming_file(err, os.path.normpath(path)) from err.__cause__
    return manifest, parse_yaml(text), path


# --- plan -------------------------------------------------------------------------------------


def archive_entry_name(declared: str) -> str:
    """Archive name of a declared path: `\\` -> `/`, empty and `.` segments dropped."""
    parts = [p for p in declared.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


def _check_declared_entry(source: str, declared: str) -> None:
    shown_entry = one_line(declared)

    def unsafe(reason: str) -> MurError:
        return MurError(
            "E-BLD-002",
            f"requires_files entry '{shown_entry}' has an unsafe path: {reason}",
            "declare files by a relative path inside the source directory",
        )

    # Judged on the archive spelling too (`\` is a separator there, see archive_entry_name), so
    # `..\x` cannot pack as the zip-slip entry `../x` that every reader refuses.
    if declared.startswith(("/", "\\")) or os.path.isabs(declared):
        raise unsafe("is an absolute path")
    if any(part == ".." for part in declared.replace("\\", "/").split("/")):
        raise unsafe("contains a '..' component")
    path = os.path.join(source, declared)
    if not os.path.exists(path):
        raise MurError("E-IO-003", f"missing required file '{shown_entry}' in {source}",
                       "add the file, or change requires_files in the artifact's murmur.yaml (docs/artifacts.md)")
    parts = [p for p in declared.split("/") if p not in ("", ".")]
    for depth in range(1, len(parts) + 1):
        link = os.path.join(source, *parts[:depth])
        try:
            st = os.lstat(link)
        except OSError as exc:
            raise _io_error("failed to read source", link, exc) from exc
        if stat.S_ISLNK(st.st_mode):
            shown = path if depth == len(parts) else link
            raise MurError(
                "E-BLD-002",
                f"requires_files entry '{shown_entry}' is a symlink ({one_line(shown)}); declare the file it "
                "points to instead",
                "copy the target into the source directory, or declare its real path",
            )


def _absolute_normalized(path: str) -> str:
    return os.path.normpath(os.path.join(os.getcwd(), path))


def plan_build(source: str, manifest: Any, output_path: str) -> BuildPlan:
    """Decide the exact entry set; every rejection happens here, before any byte is written."""
    from mur.manifest.artifact import validate_artifact_name

    validate_artifact_name(manifest.name)
    for declared in manifest.requires_files:
        _check_declared_entry(source, declared)
    output_abs = _absolute_normalized(output_path)
    try:
        source_abs = os.path.realpath(source, strict=True)
    except OSError as exc:
        raise _io_error("failed to read source", source, exc) from exc

    entries: list[PackedEntry] = []
    shadowed: list[ShadowedDeclaration] = []
    seen: set[str] = set()
    for declared in (MANIFEST_FILENAME, *manifest.requires_files):
        abs_path = os.path.normpath(os.path.join(source_abs, declared))
        name = archive_entry_name(declared)
        if abs_path in seen:
            shadowed.append(ShadowedDeclaration(declared, name))
        else:
            seen.add(abs_path)
            entries.append(PackedEntry(declared, abs_path, name))
    entries = [e for e in entries if e.source_path != output_abs]

    claimed: dict[str, str] = {}
    for entry in entries:
        first = claimed.get(entry.archive_name)
        if first is None:
            claimed[entry.archive_name] = entry.declared
        else:
            raise MurError(
                "E-BLD-002",
                f"requires_files entries '{one_line(first)}' and '{one_line(entry.declared)}' both pack as "
                f"the archive entry '{one_line(entry.archive_name)}'",
                "give each packaged file a distinct path inside the artifact",
            )
    return BuildPlan(manifest=manifest, entries=tuple(entries), shadowed=tuple(shadowed))


def resolve_output_path(source: str, output: str | None, default_name: str) -> str:
    """`-o` as given, `-o DIR/<default>` for an existing directory, else `<source>/<default>`."""
    if output is None:
        return os.path.join(source, default_name)
    if os.path.isdir(output):
        return os.path.join(output, default_name)
    return output


# --- write ------------------------------------------------------------------------------------


def zip_entry_info(name: str, size: int) -> zipfile.ZipInfo:
    """The deterministic ZipInfo every packed entry uses: fixed timestamp, mode 0644, Deflate."""
    info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3
    info.external_attr = FILE_MODE << 16
    info.file_size = size
    return info


def write_zip_atomically(output_path: str, fill: Callable[[zipfile.ZipFile], None]) -> None:
    """Create `output_path` as a zip whose entries `fill` adds: temp file beside it, fsync, rename."""
    parent = os.path.dirname(output_path) or "."
    try:
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(output_path)}.", suffix=".tmp")
    except OSError as exc:
        raise _io_error("failed to create output file", output_path, exc) from exc
    except ValueError as exc:  # a NUL byte in the version, hence in the default file name
        raise MurError("E-IO-003", f"failed to create output file at {one_line(output_path)}: {exc}") from exc
    try:
        with writing(output_path), os.fdopen(fd, "wb") as out:
            with zipfile.ZipFile(out, "w") as zf:
                fill(zf)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        try:
            os.replace(tmp, output_path)
        except OSError as exc:
            raise _io_error("failed to create output file", output_path, exc) from exc
        fsync_dir(parent)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_artifact(plan: BuildPlan, output_path: str) -> None:
    """Write the planned entries to `output_path` atomically (temp file + fsync + rename)."""

    def fill(zf: zipfile.ZipFile) -> None:
        for entry in plan.entries:
            _pack_file(zf, entry)

    write_zip_atomically(output_path, fill)


def _pack_file(zf: zipfile.ZipFile, entry: PackedEntry) -> None:
    # O_NONBLOCK: opening a FIFO named in requires_files must fail below, not hang the build.
    # The manifest may be a symlink (it was already read through it, as upstream does); a
    # requires_files entry may not (refused by the plan, and here again at open time).
    flags = os.O_RDONLY | os.O_NONBLOCK
    if entry.declared != MANIFEST_FILENAME:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(entry.source_path, flags)
        src = os.fdopen(fd, "rb")
    except OSError as exc:
        raise _io_error("failed to package file", entry.source_path, exc) from exc
    with src:
        try:
            st = os.fstat(src.fileno())
            size = st.st_size
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(21, "Is a directory")
            if not stat.S_ISREG(st.st_mode):
                raise OSError("not a regular file")
            with zf.open(zip_entry_info(entry.archive_name, size), "w") as dst:
                shutil.copyfileobj(src, dst, 1024 * 1024)
        except OSError as exc:
            if exc.errno in DISK_FULL:  # writing the archive, not reading the entry: named by the caller
                raise
            raise _io_error("failed to package file", entry.source_path, exc) from exc



# --- the command ------------------------------------------------------------------------------


def build_artifact(source: str = ".", output: str | None = None) -> str:
    """Run `mur build`: warnings go through `warn()`, returns the written artifact path."""
    from mur.artifacts import lints

    manifest, root, manifest_path = read_build_manifest(source)
    filename = os.path.basename(manifest_path)
    for field_path in lints.scan_secrets(root):
        warn("W-SEC-004", lints.secret_warning_message(filename, field_path))

    if output is None or os.path.isdir(output):
        # The version becomes part of the default file name: `../x` must not write elsewhere.
        from mur.artifacts.store import validate_version_segment

        validate_version_segment(manifest.version)
    output_path = resolve_output_path(source, output, f"{manifest.name}-{manifest.version}.mur.zip")
    plan = plan_build(source, manifest, output_path)
    for code, message, hint in lints.build_lints(plan):
        warn(code, lints.lint_warning_message(code, message, hint))

    if not output_path.endswith(".mur.zip"):
        raise MurError("E-IO-003", f"output path must end with .mur.zip: {output_path}", "give an output path ending in .mur.zip")
    if manifest.registry_runtime == "wasm":
        try:
            select_root_wasm(e.archive_name for e in plan.entries)
        except PayloadShapeError as exc:
            raise MurError(
                "E-BLD-003",
                str(exc),
                "declare exactly one root *.wasm in requires_files: (or name it capsule.wasm)",
            ) from exc
    write_artifact(plan, output_path)
    return output_path
