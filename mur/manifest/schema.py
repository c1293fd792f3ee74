"""JSON Schemas of the two manifests (`mur schema capsule|artifact`), generated from pydantic models.

Editors use them through the YAML language server (docs/manifest.md) to complete keys and flag
wrong types while typing. The capsule schema comes from `mur.manifest.capsule.Capsule`, the models
`mur run` validates with; the artifact manifest is read by a hand parser (upstream's minimal
build/publish parser, mur.manifest.artifact), so `ArtifactFields` below mirrors it, and
tests/manifest/test_manifest_schema.py keeps both in step with the parsers through the golden cases.

Two adjustments make the capsule schema say what its loader accepts: a YAML null (`key:` with no
value) is "absent" there, so every optional property also admits null; and roles, which the models
keep as plain strings to give rule errors their wording, get their enum. The artifact parser refuses
an explicit null for `execution` and `requires_files`, and `ArtifactFields` says so itself.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from mur.manifest.capsule import ROLES, Capsule

KINDS = ("capsule", "artifact")
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _any_case(words: tuple[str, ...]) -> str:
    """A pattern matching any of `words` in any letter case (JSON Schema regexes have no /i flag)."""
    return "^(?:" + "|".join("".join(f"[{c.lower()}{c.upper()}]" for c in w) for w in words) + ")$"


class ArtifactFields(BaseModel):
    """An artifact's murmur.yaml (`mur build`, `mur publish`): identity plus what gets packaged."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: str = Field(description="lowercase letters, digits and inner hyphens; at most 100 characters",
                      pattern=r"^[a-z0-9](?:[a-z0-9-]{0,98}[a-z0-9])?$")
    version: str = Field(description='a string: quote it ("0.1.0"); latest, stable and edge are reserved')
    # Not an enum: upstream's build parser takes any role string, and so does mur's.
    runtime: Optional[str] = Field(None, description="the artifact's role: tool (default), driver, hook or skill")
    implementation: Optional[str] = Field(None, description="wasm (default) or native, for a tool")
    execution: str = Field(None, description="registry packaging type, overrides the derived one "
                                                       "(wasm, native or static; any letter case)",
                                     pattern=_any_case(("wasm", "native", "static")))
    requires_files: list[str] = Field(
        None, description="every file packaged besides murmur.yaml, relative to it (default [skill.md] for a skill)")
    description: Optional[str] = Field(None, description="shown by `mur search` and to the model for a tool")
    input_schema: Optional[dict[str, Any]] = Field(None, description="a tool's input, as a JSON Schema object")


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a `capsule` or an `artifact` manifest."""
    if kind == "capsule":
        schema = Capsule.model_json_schema()
        schema["title"] = "mur capsule manifest (murmur.yaml for mur run)"
        _enum(schema["$defs"]["ArtifactDecl"]["properties"]["runtime"], ROLES)
        for model in [schema, *schema["$defs"].values()]:
            required = set(model.get("required", ()))
            for name, prop in model.get("properties", {}).items():
                if name not in required:
                    model["properties"][name] = _nullable(prop)
    elif kind == "artifact":
        schema = ArtifactFields.model_json_schema()
        schema["title"] = "mur artifact manifest (murmur.yaml for mur build)"
        for prop in schema["properties"].values():
            if prop.get("default", ...) is None:
                del prop["default"]
    else:
        raise ValueError(f"unknown manifest kind {kind!r} (expected one of: {', '.join(KINDS)})")
    return {"$schema": DIALECT, **schema}


def _enum(prop: dict[str, Any], values: tuple[str, ...]) -> None:
    """Restrict the string variant of `prop` to `values`."""
    for variant in prop.get("anyOf", [prop]):
        if variant.get("type") == "string":
            variant["enum"] = list(values)


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """`prop` admitting null too (the loader drops null values), keeping its annotations outside."""
    variants = prop.get("anyOf")
    if variants is not None and {"type": "null"} in variants:
        return prop
    notes = {k: prop[k] for k in ("title", "description", "default") if k in prop}
    body = {k: v for k, v in prop.items() if k not in notes}
    return {"anyOf": [*(variants if variants is not None and len(body) == 1 else [body]), {"type": "null"}],
            **notes}
