"""Loading a capsule `murmur.yaml`: text -> YAML -> typed models -> rules -> LoadedCapsule.

Every failure is a MurError with the spec's code:
  E-MAN-002  YAML syntax (with line and column)
  E-MAN-001  a required field is missing (the message names its dotted path)
  E-MAN-003  wrong type, bad value or broken rule (the message names the dotted path and the reason)
  E-CAP-001  a network allow entry is malformed
  E-CAP-002  a filesystem scope is absolute or escapes the workdir
Unknown keys are not errors: each gets a W-MAN-001 warning (with a "did you mean" when one is close),
so a manifest written for a newer runtime still loads and a typo is still visible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pydantic import ValidationError

from mur.errors import MurError, warn
from mur.manifest.capsule import Capsule
from mur.manifest.grants import ArtifactGrant, resolve_grants
from mur.manifest.network import AllowEntry
from mur.manifest.rules import validate_rules, validate_scopes_and_networks
from mur.manifest.unknown import unknown_key_messages
from mur.manifest.yamlio import (
    MANIFEST_FILENAME,
    invalid_type,
    naming_file,
    one_line,
    parse_yaml,
    read_manifest_text,
    single_line_error,
    type_name,
)
from mur.paths import manifest_path

# Free-form mappings whose contents are never touched or checked for unknown keys.
_OPAQUE = {("inference", "driver", "config"), ("inference", "provider", "config")}


@dataclass
class LoadedCapsule:
    """A validated capsule manifest plus what was derived from it (parse, then resolve)."""

    capsule: Capsule
    path: Path | None
    api_key: str | None = None
    network_allow: list[AllowEntry] = field(default_factory=list)
    grants: dict[str, ArtifactGrant] = field(default_factory=dict)
    stage_warnings: list[tuple[str, str]] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        """The directory holding murmur.yaml (relative paths in the manifest resolve against it)."""
        return self.path.parent if self.path else Path.cwd()

    def emit_stage_warnings(self) -> None:
        """Print the staging-time warnings (W-SEC-006..009), once."""
        for code, message in self.stage_warnings:
            warn(code, message)
        self.stage_warnings = []


def load_capsule(path: str | Path, *, env: Mapping[str, str] | None = None, resolve_env: bool = True) -> LoadedCapsule:
    """Read, parse and validate a capsule manifest file (a directory means its murmur.yaml).

    Errors name the file as the user gave it (`m.yaml: field ...`), not always `murmur.yaml`.
    `env` (default: the process environment) resolves `${VAR}` references such as
    `inference.api_key`; `resolve_env=False` leaves them unresolved (`LoadedCapsule.api_key` is
    None) for commands that never call the provider (install, doctor, deploy)."""
    path = manifest_path(path)
    try:
        text = read_manifest_text(path)
    except MurError as err:  # the path is the user's and may hold a line break
        raise single_line_error(err) from err.__cause__
    try:
        loaded = parse_capsule(text, env=env, resolve_env=resolve_env)
    except MurError as err:
        raise naming_file(err, str(path)) from err.__cause__
    loaded.path = path.resolve()
    return loaded


def parse_capsule(text: str, *, env: Mapping[str, str] | None = None, resolve_env: bool = True) -> LoadedCapsule:
    """Parse and validate capsule manifest text (no file access)."""
    try:
        return _parse_capsule(text, (os.environ if env is None else env) if resolve_env else None)
    except MurError as err:
        raise single_line_error(err) from err.__cause__


def _parse_capsule(text: str, env: Mapping[str, str] | None) -> LoadedCapsule:
    raw = parse_yaml(text)
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise MurError(
            "E-MAN-003",
            f"{MANIFEST_FILENAME}: field '<root>' has invalid type (expected mapping, got {type_name(raw)})",
        )
    cleaned = normalize(raw)
    for message in unknown_key_messages(cleaned):
        warn("W-MAN-001", one_line(message))
    try:
        capsule = Capsule.model_validate(cleaned)
    except ValidationError as exc:
        raise _translate(exc) from None
    api_key = validate_rules(capsule, env)
    network_allow = validate_scopes_and_networks(capsule)
    grants, stage_warnings = resolve_grants(capsule, network_allow)
    return LoadedCapsule(
        capsule=capsule,
        path=None,
        api_key=api_key,
        network_allow=network_allow,
        grants=grants,
        stage_warnings=stage_warnings,
    )


def normalize(value: Any, path: tuple[Any, ...] = ()) -> Any:
    """Treat YAML null and blank strings in mappings as absent (upstream trims and filters them);
    refuse mapping keys that are not strings (no field can be named by a number or a boolean)."""
    if path in _OPAQUE:
        return value
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                where = dotted(path) or "<root>"
                raise MurError(
                    "E-MAN-003",
                    f"{MANIFEST_FILENAME}: field '{where}' has a key of invalid type "
                    f"(expected string, got {type_name(key)})",
                )
            if item is None or (isinstance(item, str) and not item.strip()):
                continue
            out[key] = normalize(item, path + (key,))
        return out
    if isinstance(value, list):
        return [normalize(item, path + (index,)) for index, item in enumerate(value)]
    return value


# --- pydantic error translation ----------------------------------------------------------------

_EXPECTED = {
    "string_type": "string",
    "int_type": "integer",
    "int_parsing": "integer",
    "int_from_float": "integer",
    "bool_type": "boolean",
    "bool_parsing": "boolean",
    "float_type": "number",
    "float_parsing": "number",
    "list_type": "sequence",
    "dict_type": "mapping",
    "model_type": "mapping",
    "model_attributes_type": "mapping",
}

_SECTION = {
    "capabilities": "capability",
    "artifacts": "capability",
    "inference": "inference",
    "context": "inference",
    "lifecycle": "lifecycle",
    "network": "network",
    "observability": "observability",
}


def dotted(loc: tuple[Any, ...]) -> str:
    """('artifacts', 0, 'name') -> 'artifacts[0].name'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _translate(exc: ValidationError) -> MurError:
    err = exc.errors(include_url=False)[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]")))
    path = dotted(loc)
    kind = err["type"]
    value = err.get("input")
    if kind == "missing":
        return MurError("E-MAN-001", f"{MANIFEST_FILENAME}: missing required field '{path}'", _missing_hint(path))
    if kind == "literal_error" and not isinstance(value, str):  # `true`, `1`, a list: a type error, not a value
        return MurError(
            "E-MAN-003",
            f"{MANIFEST_FILENAME}: field '{path}' has invalid type (expected string, got {type_name(value)})",
        )
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        choices = expected.replace("'", "").replace(" or ", ", ")
        if path == "capabilities.containment" or path.endswith(".capabilities.containment"):
            return MurError(
                "E-MAN-003",
                f"{MANIFEST_FILENAME}: invalid capability config for '{path}': "
                f"must be one of: advisory, scoped, sealed; got '{value}'",
            )
        if path == "inference.transport":
            return MurError(
                "E-MAN-003",
                f"{MANIFEST_FILENAME}: invalid inference config for 'inference.transport': unknown value '{value}'",
                "use transport: http (a WASM driver) or transport: process (the claude CLI)",
            )
        return MurError(
            "E-MAN-003",
            f"{MANIFEST_FILENAME}: field '{path}' has invalid value '{value}' (expected one of: {choices})",
        )
    if kind in ("greater_than", "greater_than_equal", "less_than_equal", "less_than"):
        section = _SECTION.get(str(loc[0]), "manifest")
        ctx = err.get("ctx", {})
        if path == "network.internal_port":
            reason = "must be between 1 and 65535"
        elif kind in ("less_than_equal", "less_than"):
            reason = f"must be at most {ctx.get('le', ctx.get('lt'))}"
        elif kind == "greater_than_equal":
            reason = "must not be negative"
        elif section == "inference":
            reason = "must be greater than 0"  # upstream's wording for inference.* and context.*
        else:
            reason = "must be greater than zero"
        return MurError("E-MAN-003", f"{MANIFEST_FILENAME}: invalid {section} config for '{path}': {reason}")
    expected = _EXPECTED.get(kind)
    if expected is None:
        return MurError("E-MAN-003", f"{MANIFEST_FILENAME}: field '{path}' is invalid: {err.get('msg', kind)}")
    return invalid_type(path, expected, value)


def _missing_hint(path: str) -> str | None:
    if path in ("name", "version"):
        return "every capsule manifest needs a name and a version string"
    if path.startswith("artifacts[") and path.endswith(".version"):
        return "give the artifact a version, or a local `source:` with `local_source: true`"
    return None
