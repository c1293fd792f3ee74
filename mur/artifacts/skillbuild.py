"""`mur build --skill`: package an external skill (a directory or a .zip holding SKILL.md) as a `.mur.zip`.

Upstream's mode (`commands/build.rs`): the author writes no `murmur.yaml`; one is generated.

* Arguments: `--skill` with no value reads SOURCE; a value with `/`, `\\` or a leading `.` is the
  input path; any other value is the artifact name and SOURCE is the input.
* Input: the root-level regular files of the directory or zip (nested ones are ignored). `skill.md`
  is found in any casing and stored as `skill.md`; a root `murmur.yaml` (any casing) is the manifest
  and must say `runtime: skill`; every other root file is packed as is. Symlinks are refused, as the
  normal build refuses them; a zip is read in memory through package.py's decompression ceiling.
* Manifest: generated (name, version, `runtime: skill`, description, requires_files) when absent;
  kept byte for byte when present, unless `NAME` / `--version` / `--summary` override a field or its
  requires_files must grow to cover what is packed — only then is it re-serialised. Either way it is
  the artifact parser's to accept before anything is written.
* Output: `<name>-<version>.mur.zip` in the current directory (or `-o`), written with build.py's
  deterministic entries (murmur.yaml, skill.md, then the other files sorted) and atomic rename.

Departures from upstream, documented in docs/artifacts.md: inferred names use `-` (not `_`) for
other characters so they pass the spec's name rule; `.` infers from the directory's own name; an
existing manifest's name and version name the file; root `*.mur.zip` files (earlier builds) are not
packed; two files that both pack as `skill.md` (or `murmur.yaml`) are refused.
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from dataclasses import dataclass
from typing import Any

import yaml

from mur.artifacts.build import (
    MANIFEST_FILENAME,
    archive_entry_name,
    os_error_text,
    resolve_output_path,
    write_zip_atomically,
    zip_entry_info,
)
from mur.artifacts import lints
from mur.artifacts.package import (
    SKILL_MD_ENTRY,
    ArchiveError,
    ArtifactArchive,
    PayloadShapeError,
    max_decompressed_bytes,
    select_root_wasm,
)
from mur.artifacts.store import validate_version_segment
from mur.errors import MurError, warn
from mur.manifest.artifact import MAX_NAME_LEN, parse_artifact_manifest, validate_artifact_name
from mur.manifest.yamlio import one_line, parse_yaml, type_name

DEFAULT_VERSION = "0.1.0"
FALLBACK_NAME = "skill"
BUILD_OUTPUT_SUFFIX = ".mur.zip"
_NO_WRAP = 1 << 30


@dataclass(frozen=True)
class SkillInput:
    """What a skill directory or zip holds at its root."""

    path: str
    skill_md: bytes
    manifest: bytes | None
    extras: tuple[tuple[str, bytes], ...]  # sorted by name


# --- arguments and the inferred name ----------------------------------------------------------


def looks_like_path(value: str) -> bool:
    """Upstream's test for a `--skill` value: a path has `/` or `\\`, or starts with `.`."""
    return "/" in value or "\\" in value or value.startswith(".")


def resolve_skill_args(skill_value: str, source: str) -> tuple[str | None, str]:
    """(explicit name or None, input path) from `--skill`'s value ("" = none given) and SOURCE."""
    if not skill_value:
        return None, source
    if looks_like_path(skill_value):
        return None, skill_value
    return skill_value, source


def infer_skill_name(input_path: str) -> str:
    """An artifact name from the input's last path component (`My Skill.zip` -> `my-skill`)."""
    # abspath first, so `.` and `./` name the directory itself rather than nothing.
    stem = os.path.basename(os.path.abspath(input_path.replace("\\", "/")))
    if stem.lower().endswith(".zip"):
        stem = stem[: -len(".zip")]
    chars = [c if ("a" <= c <= "z" or "0" <= c <= "9") else "-" for c in stem.lower()]
    name = "-".join(part for part in "".join(chars).split("-") if part)
    name = name[:MAX_NAME_LEN].rstrip("-")
    return name or FALLBACK_NAME


# --- reading the input ------------------------------------------------------------------------


def _is_zip_input(path: str) -> bool:
    return path.lower().endswith(".zip") and not os.path.isdir(path)


def _is_packable_root_name(name: str) -> bool:
    # `\` is a separator in archive names (build.archive_entry_name): such a name is nested, not root.
    return name not in ("", ".", "..") and "/" not in name and "\\" not in name


def _io_code(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "E-IO-001"
    if isinstance(exc, PermissionError):
        return "E-IO-002"
    return "E-IO-003"


def _symlink_error(what: str, path: str) -> MurError:
    return MurError(
        "E-BLD-002",
        f"{what} in {one_line(path)} is a symlink; --skill packs only regular files",
        "replace the link with a copy of the file it points to",
    )


def _utf8_name(name: str, path: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MurError(
            "E-IO-003", f"file name {one_line(ascii(name))} in {one_line(path)} is not valid UTF-8"
        ) from exc
    return name


def _sort_root_files(path: str, files: list[tuple[str, bytes]]) -> SkillInput:
    """Split root files into skill.md, murmur.yaml and extras (E-IO-001 / E-BLD-002 on a bad set)."""
    skills = sorted((n, d) for n, d in files if n.lower() == SKILL_MD_ENTRY)
    manifests = sorted((n, d) for n, d in files if n.lower() == MANIFEST_FILENAME)
    for found, entry in ((skills, SKILL_MD_ENTRY), (manifests, MANIFEST_FILENAME)):
        if len(found) > 1:
            names = " and ".join(f"'{one_line(n)}'" for n, _ in found)
            raise MurError(
                "E-BLD-002",
                f"{names} in {one_line(path)} both pack as the archive entry '{entry}'",
                "keep only one of them",
            )
    if not skills:
        where = f"zip {path}" if _is_zip_input(path) else path
        raise MurError("E-IO-001", f"SKILL.md not found in {one_line(where)} (case-insensitive search found no match)")
    special = {SKILL_MD_ENTRY, MANIFEST_FILENAME}
    extras = tuple(sorted((n, d) for n, d in files if n.lower() not in special))
    return SkillInput(path, skills[0][1], manifests[0][1] if manifests else None, extras)


def _read_dir(path: str) -> SkillInput:
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError as exc:
        raise MurError(_io_code(exc), f"cannot read directory {one_line(path)}: {os_error_text(exc)}") from exc
    files: list[tuple[str, bytes]] = []
    for entry in entries:
        name = entry.name
        if not _is_packable_root_name(name) or name.lower().endswith(BUILD_OUTPUT_SUFFIX):
            continue
        try:
            if entry.is_symlink():
                raise _symlink_error(f"'{one_line(name)}'", path)
            if not entry.is_file(follow_symlinks=False):
                continue  # subdirectories, FIFOs, sockets, devices
            files.append((_utf8_name(name, path), _read_regular_file(entry.path)))
        except OSError as exc:
            raise MurError(_io_code(exc), f"cannot read {one_line(entry.path)}: {os_error_text(exc)}") from exc
    return _sort_root_files(path, files)


def _read_regular_file(path: str) -> bytes:
    # O_NOFOLLOW + fstat: the file read is the regular file that was listed, not a swapped-in link.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError("not a regular file")
        return fh.read()


def _read_zip(path: str) -> SkillInput:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise MurError(_io_code(exc), f"cannot open {one_line(path)}: {os_error_text(exc)}") from exc

    def unreadable(why: object) -> MurError:
        return MurError("E-IO-003", f"cannot read zip {one_line(path)}: {one_line(str(why))}")

    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as exc:
        raise unreadable(exc) from exc
    names = [i.filename for i in infos]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise unreadable(f"duplicate entry '{duplicate}'")
    archive = ArtifactArchive(data)
    limit = max_decompressed_bytes()
    total = 0
    files: list[tuple[str, bytes]] = []
    for info in infos:
        name = info.filename
        if info.is_dir() or not _is_packable_root_name(name) or name.lower().endswith(BUILD_OUTPUT_SUFFIX):
            continue
        if info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16):
            raise _symlink_error(f"zip entry '{one_line(name)}'", path)
        try:
            content = archive.read(name, limit=limit)
        except ArchiveError as exc:
            raise unreadable(exc) from exc
        total += len(content)
        if total > limit:  # the ceiling holds for the whole input too, as in ArtifactArchive.extract_all
            raise unreadable(f"zip entry '{name}' exceeds the {limit}-byte decompression ceiling")
        files.append((name, content))
    return _sort_root_files(path, files)


def read_skill_input(path: str) -> SkillInput:
    """The root files of a skill directory, or of a `.zip` file (decided by the `.zip` suffix)."""
    return _read_zip(path) if _is_zip_input(path) else _read_dir(path)


# --- the manifest -----------------------------------------------------------------------------


class _ManifestDumper(yaml.SafeDumper):
    """SafeDumper that quotes a string whenever mur's reader would not read it back as that string.

    PyYAML leaves a string plain unless YAML 1.1 would misread it; mur reads YAML 1.2 scalars
    (yamlio), where a plain `1e5` or `0o17` is a number. So each string is also tried as a
    document of its own, and double-quoted unless it reads back as itself.
    """


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    try:
        plain_safe = parse_yaml(value) == value
    except MurError:
        plain_safe = True  # not a scalar document at all: PyYAML's own analysis quotes it
    style = None if plain_safe else '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)


class _Version(str):
    """A version string, written single-quoted as upstream writes it (`version: '3.1.4'`)."""


_ManifestDumper.add_representer(
    _Version, lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", str(value), style="'"))


def _dump_manifest(root: dict) -> str:
    """YAML text for `root` that mur's reader parses back to exactly `root`."""
    return yaml.dump(
        root, Dumper=_ManifestDumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=_NO_WRAP
    )


def _manifest_runtime_check(root: Any) -> None:
    runtime = root.get("runtime") if isinstance(root, dict) else None
    if runtime != "skill":
        shown = runtime if isinstance(runtime, str) else ""
        raise MurError(
            "E-MAN-003",
            f'{MANIFEST_FILENAME} declares runtime: "{one_line(shown)}" but --skill requires runtime: skill',
            "set `runtime: skill` in murmur.yaml, or build it without --skill",
        )


def _declared_requires(root: dict) -> list[str] | None:
    """The manifest's explicit requires_files, or None when it relies on the default."""
    if "requires_files" not in root:
        return None
    files = root["requires_files"]
    wrong = [files] if not isinstance(files, list) else [f for f in files if not isinstance(f, str)]
    if wrong:  # the artifact parser's message, before a missing name could mask it
        raise MurError(
            "E-MAN-003",
            f"{MANIFEST_FILENAME}: field 'requires_files' has invalid type "
            f"(expected sequence of strings, got {type_name(wrong[0])})",
        )
    return list(files)


def skill_manifest_text(
    skill: SkillInput, name: str | None, version: str | None, summary: str | None
) -> str:
    """The manifest to pack: skill's own (verbatim when nothing must change) or a generated one."""
    packed = [SKILL_MD_ENTRY, *(n for n, _ in skill.extras)]
    if skill.manifest is None:
        root: dict[str, Any] = {
            "name": name or infer_skill_name(skill.path),
            "version": _Version(version or DEFAULT_VERSION),
            "runtime": "skill",
        }
        if summary is not None:
            root["description"] = summary
        root["requires_files"] = packed
        return _dump_manifest(root)

    try:
        original = skill.manifest.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MurError(
            "E-IO-003",
            f"failed to read {MANIFEST_FILENAME} in {one_line(skill.path)}: stream did not contain valid UTF-8",
        ) from exc
    root = parse_yaml(original)
    if not isinstance(root, dict):
        parse_artifact_manifest(original)  # raises the parser's own "expected mapping" error
    _manifest_runtime_check(root)
    changed = False
    for key, value in (("name", name), ("version", version), ("description", summary)):
        if value is not None and root.get(key) != value:
            root[key] = _Version(value) if key == "version" else value
            changed = True
    declared = _declared_requires(root)
    covered = [SKILL_MD_ENTRY] if declared is None else declared
    covered_names = {archive_entry_name(entry) for entry in covered}
    for entry in covered:
        if archive_entry_name(entry) not in (MANIFEST_FILENAME, *packed):
            raise MurError(
                "E-IO-003",
                f"missing required file '{one_line(entry)}' in {one_line(skill.path)}",
                "--skill packs only root-level files (SKILL.md is stored as skill.md); "
                "fix requires_files, or build with plain `mur build`",
            )
    missing = [entry for entry in packed if entry not in covered_names]
    if missing:
        root["requires_files"] = covered + missing
        changed = True
    return _dump_manifest(root) if changed else original


# --- the command ------------------------------------------------------------------------------


def build_skill(
    source: str = ".",
    skill_value: str = "",
    *,
    version: str | None = None,
    summary: str | None = None,
    output: str | None = None,
) -> str:
    """Run `mur build --skill [skill_value] [source]`: returns the written artifact path."""
    name, input_path = resolve_skill_args(skill_value, source)
    if name is not None:
        validate_artifact_name(name)
    if version is not None:
        validate_version_segment(version)
    skill = read_skill_input(input_path)

    text = skill_manifest_text(skill, name, version, summary)
    manifest = parse_artifact_manifest(text)
    for field_path in lints.scan_secrets(parse_yaml(text)):
        warn("W-SEC-004", lints.secret_warning_message(MANIFEST_FILENAME, field_path))
    validate_artifact_name(manifest.name)

    if output is None or os.path.isdir(output):
        validate_version_segment(manifest.version)  # it becomes part of the file name
    output_path = resolve_output_path(os.getcwd(), output, f"{manifest.name}-{manifest.version}{BUILD_OUTPUT_SUFFIX}")
    if not output_path.endswith(BUILD_OUTPUT_SUFFIX):
        raise MurError("E-IO-003", f"output path must end with .mur.zip: {output_path}", "give an output path ending in .mur.zip")

    entries = [
        (MANIFEST_FILENAME, text.encode("utf-8")),  # a kept manifest decodes and re-encodes losslessly
        (SKILL_MD_ENTRY, skill.skill_md),
        *skill.extras,
    ]
    if manifest.registry_runtime == "wasm":  # only with an explicit `execution: wasm`
        try:
            select_root_wasm(n for n, _ in entries)
        except PayloadShapeError as exc:
            raise MurError("E-BLD-003", str(exc), "drop `execution: wasm`: a skill is a static artifact") from exc

    def fill(zf: zipfile.ZipFile) -> None:
        for entry_name, data in entries:
            zf.writestr(zip_entry_info(entry_name, len(data)), data)

    write_zip_atomically(output_path, fill)
    return output_path

