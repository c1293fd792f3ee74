"""`mur schema capsule|artifact`: the JSON Schemas agree with the parsers on every golden case.

A case the parser accepts validates against the schema (the schema is never stricter); a case the
parser refuses for a type, a bad value, a missing top-level field or a bad name fails it too (never
looser on what an editor can see). So a field added to the models without the schema following, or
the reverse, fails here. Capsule documents are compared as the loader sees them, after it drops null
and blank values (the schema admits null; a blank string is for the editor to flag). Cross-field
rules (a scorer's `expected`, an artifact's version unless it has a `source:`) are not the schema's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from mur.errors import MurError
from mur.manifest.artifact import PARSED_FIELDS
from mur.manifest.load import normalize
from mur.manifest.schema import ArtifactFields, json_schema
from mur.manifest.yamlio import parse_yaml

HERE = Path(__file__).parent
SCHEMA_ERRORS = ("has invalid type", "has invalid value", "invalid artifact name", "invalid capability config for 'capabilities.containment'")
ROLE_CASES = {"err-man003-runtime-wasm", "err-man003-runtime-native"}  # `runtime:` is a role, not wasm/native
MISSING_TOP_LEVEL = re.compile(r"missing required field '[a-z_]+'$")
# Where the schema is knowingly stricter than the loader, and why.
STRICTER = {"floor-trimmed-value": "the loader trims blanks around a containment class; the schema wants it exact"}


def _cases(folder: str) -> list:
    """(name, parsed YAML, the expected error's text or None) for each case that is valid YAML."""
    out = []
    for path in sorted((HERE / folder).glob("*.yaml")):
        try:
            doc = parse_yaml(path.read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - a YAML syntax case: nothing for a schema to say
            continue
        err = path.with_suffix(".err")
        error = next((ln for ln in err.read_text().splitlines() if ln.startswith("error[")), None) if err.exists() else None
        out.append(pytest.param(path.stem, doc, error, id=path.stem))
    return out


def _check(kind: str, doc: object, error: str | None) -> None:
    validator = jsonschema.Draft202012Validator(json_schema(kind))
    problems = [e.message for e in validator.iter_errors(doc)]
    if error is None:
        assert problems == []
    elif any(words in error for words in SCHEMA_ERRORS) or MISSING_TOP_LEVEL.search(error):
        assert problems, f"the schema accepts what the parser refuses: {error}"


@pytest.mark.parametrize("name, doc, error", _cases("cases"))
def test_capsule_schema_agrees_with_the_loader(name, doc, error):
    try:
        doc = normalize(doc)
    except MurError:  # a non-string key: refused before any model, nothing for the schema to add
        pass
    if name in STRICTER:
        validator = jsonschema.Draft202012Validator(json_schema("capsule"))
        assert list(validator.iter_errors(doc)), STRICTER[name]
        return
    if name in ROLE_CASES:
        assert error is not None
        validator = jsonschema.Draft202012Validator(json_schema("capsule"))
        assert list(validator.iter_errors(doc)), "the schema admits a runtime that is no role"
        return
    _check("capsule", doc, error)


def test_capsule_schema_admits_null_as_absent_but_not_for_required_fields():
    """`key:` with no value is absent to the loader, so an editor must not flag it; `name:` is missing."""
    validator = jsonschema.Draft202012Validator(json_schema("capsule"))
    doc = {"name": "x", "version": "1", "inference": None, "capabilities": {"network": None, "containment": None},
           "artifacts": [{"name": "t", "version": None, "runtime": None}]}
    assert list(validator.iter_errors(doc)) == []
    assert list(validator.iter_errors({**doc, "name": None}))


@pytest.mark.parametrize("name, doc, error", _cases("artifact_cases"))
def test_artifact_schema_agrees_with_the_parser(name, doc, error):
    _check("artifact", doc, error)


def test_artifact_schema_names_every_field_the_parser_reads():
    assert set(PARSED_FIELDS) <= set(ArtifactFields.model_fields)


def test_schemas_are_valid_draft_2020_12():
    for kind in ("capsule", "artifact"):
        jsonschema.Draft202012Validator.check_schema(json_schema(kind))


def test_mur_schema_prints_them(capsys):
    from mur.cli.main import main

    for args, kind in ((["schema"], "capsule"), (["schema", "capsule"], "capsule"), (["schema", "artifact"], "artifact")):
        with pytest.raises(SystemExit) as exc:
            main(args)
        out = capsys.readouterr().out
        assert exc.value.code == 0 and json.loads(out) == json_schema(kind)
    with pytest.raises(SystemExit) as exc:
        main(["schema", "lock"])
    assert exc.value.code == 2
