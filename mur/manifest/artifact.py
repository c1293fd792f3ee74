"""The artifact manifest (spec part 1): the identity `mur build` and `mur publish` read.

    name: my-tool            # required; [a-z0-9-], inner hyphens, 1..100 chars (E-BLD-001)
    version: "0.1.0"         # required; a string
    runtime: tool            # tool | driver | hook | skill (default tool)
    implementation: wasm     # wasm | native (tools)
    execution: static        # wasm | native | static, case-insensitive; authoritative when set
    requires_files: [...]    # what the build packs besides murmur.yaml; default [skill.md] for skills

Everything else (description, input_schema, binding, ...) is kept in ``extra`` untouched. A
``capabilities:`` block inside an artifact is inert by design: only the capsule operator grants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.manifest.yamlio import (
    MANIFEST_FILENAME,
    invalid_type,
    one_line,
    parse_yaml,
    read_manifest_text,
    single_line_error,
)

MAX_NAME_LEN = 100
EXECUTION_TYPES = ("wasm", "native", "static")
RESERVED_VERSIONS = ("latest", "stable", "edge")
# The keys the parser reads; every other key is kept in `extra` (description, input_schema, ...).
PARSED_FIELDS = ("name", "version", "runtime", "implementation", "execution", "requires_files")


@dataclass(frozen=True)
class ArtifactManifest:
    """A parsed artifact `murmur.yaml`."""

    name: str
    version: str
    runtime: str = "tool"
    implementation: str | None = None
    execution: str | None = None
    requires_files: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def registry_runtime(self) -> str:
        """wasm | native | static: `execution` wins, else derived from the role."""
        if self.execution:
            return self.execution
        if self.runtime == "skill":
            return "static"
        if self.runtime == "tool" and self.implementation == "native":
            return "native"
        return "wasm"

    @property
    def description(self) -> str:
        value = self.extra.get("description")
        return value if isinstance(value, str) else ""


def _required_string(root: dict, key: str) -> str:
    if key not in root:
        raise MurError("E-MAN-001", f"{MANIFEST_FILENAME}: missing required field '{key}'")
    value = root[key]
    if not isinstance(value, str):  # an explicit null is a wrong type, as upstream reads it
        raise invalid_type(key, "string", value)
    return value


def _optional_string(root: dict, key: str) -> str | None:
    value = root.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid_type(key, "string", value)
    return value


def validate_artifact_name(name: str) -> None:
    """E-BLD-001 unless `name` is lowercase letters, digits and inner hyphens, 1..100 chars."""

    def bad(reason: str) -> MurError:
        return MurError(
            "E-BLD-001",
            f"invalid artifact name '{one_line(name)}': {reason}",
            "artifact names are lowercase letters, digits and inner hyphens, e.g. my-tool",
        )

    if not name:
        raise bad("must not be empty")
    if len(name) > MAX_NAME_LEN:
        raise bad(f"must be at most {MAX_NAME_LEN} characters")
    for ch in name:
        if not (("a" <= ch <= "z") or ("0" <= ch <= "9") or ch == "-"):
            raise bad(f"may contain only lowercase letters, digits and '-' (found {one_line(repr(ch))})")
    if name.startswith("-") or name.endswith("-"):
        raise bad("must not start or end with '-'")


def parse_artifact_manifest(text: str) -> ArtifactManifest:
    """Parse artifact manifest text (no filesystem checks; name rule checked by `validate_artifact_name`)."""
    try:
        return _parse_artifact_manifest(text)
    except MurError as err:
        raise single_line_error(err) from err.__cause__


def _parse_artifact_manifest(text: str) -> ArtifactManifest:
    root = parse_yaml(text)
    if not isinstance(root, dict):  # an empty document is null: a wrong type, as upstream reads it
        raise invalid_type("<root>", "mapping", root)
    name = _required_string(root, "name")
    version = _required_string(root, "version")
    runtime = _optional_string(root, "runtime") or "tool"
    implementation = _optional_string(root, "implementation")
    if "execution" in root and root["execution"] is None:
        raise invalid_type("execution", "string", None)
    execution = _optional_string(root, "execution")
    if execution is not None:
        if execution.lower() not in EXECUTION_TYPES:
            raise MurError(
                "E-MAN-003",
                f"{MANIFEST_FILENAME}: field 'execution' has invalid type "
                f"(expected one of: wasm, native, static, got {execution})",
            )
        execution = execution.lower()
    if "requires_files" in root:
        files = root["requires_files"]
        if not isinstance(files, list):
            raise invalid_type("requires_files", "sequence of strings", files)
        for entry in files:
            if not isinstance(entry, str):
                raise invalid_type("requires_files", "sequence of strings", entry)
        requires = tuple(files)
    else:
        requires = ("skill.md",) if runtime == "skill" else ()
    extra = {k: v for k, v in root.items() if k not in PARSED_FIELDS}
    return ArtifactManifest(
        name=name,
        version=version,
        runtime=runtime,
        implementation=implementation,
        execution=execution,
        requires_files=requires,
        extra=extra,
    )


def load_artifact_manifest(source_dir: Path) -> ArtifactManifest:
    """Read and parse `<source_dir>/murmur.yaml`."""
    return parse_artifact_manifest(read_manifest_text(Path(source_dir) / MANIFEST_FILENAME))
