"""The artifact manifest (spec part 1): golden cases plus `mur build DIR` through the real CLI.

`artifact_cases/<name>.yaml` beside `<name>.json` (the parsed identity: fields, registry packaging
type) or `<name>.err` (the exact error). The in-process runner does what `mur build` does first:
parse, then check the name rule (E-BLD-001). MUR_REGEN_GOLDEN=1 rewrites the expectations.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from manifest_support import run_mur
from mur.errors import MurError
from mur.manifest.artifact import parse_artifact_manifest, validate_artifact_name
from mur.errors import FALLBACK_HINTS

CASES = Path(__file__).parent / "artifact_cases"
CASE_NAMES = sorted(p.stem for p in CASES.glob("*.yaml"))


def _identity(text: str) -> tuple[dict | None, str]:
    try:
        m = parse_artifact_manifest(text)
        validate_artifact_name(m.name)
    except MurError as err:
        return None, err.render() + "\n"
    return {
        "name": m.name,
        "version": m.version,
        "runtime": m.runtime,
        "implementation": m.implementation,
        "execution": m.execution,
        "registry_runtime": m.registry_runtime,
        "requires_files": list(m.requires_files),
        "extra": m.extra,
    }, ""


@pytest.mark.parametrize("name", CASE_NAMES)
def test_artifact_case(name):
    text = (CASES / f"{name}.yaml").read_text(encoding="utf-8")
    got, err = _identity(text)
    json_path, err_path = CASES / f"{name}.json", CASES / f"{name}.err"
    if os.environ.get("MUR_REGEN_GOLDEN") == "1":
        for path in (json_path, err_path):
            path.unlink(missing_ok=True)
        if got is not None:
            json_path.write_text(json.dumps(got, indent=2) + "\n")
        else:
            err_path.write_text(err)
    if name.startswith("ok-"):
        assert got == json.loads(json_path.read_text())
    else:
        assert got is None and err == err_path.read_text()


def test_execution_is_authoritative_and_roles_derive_otherwise():
    def rt(text: str) -> str:
        return parse_artifact_manifest('name: a\nversion: "1"\n' + text).registry_runtime

    assert rt("runtime: skill\n") == "static"
    assert rt("runtime: tool\nimplementation: native\n") == "native"
    assert rt("runtime: driver\nimplementation: native\n") == "wasm"  # only a tool derives native
    assert rt("runtime: hook\n") == "wasm"
    assert rt("") == "wasm"
    for declared in ("wasm", "native", "static", "WASM", "Static"):
        for role in ("tool", "skill", "hook", "driver"):
            assert rt(f"runtime: {role}\nexecution: {declared}\n") == declared.lower()


def test_name_rule_boundaries():
    for ok in ("a", "0", "a-b", "a--b", "x" * 100, "my-tool-2"):
        validate_artifact_name(ok)
    for bad in ("", "-a", "a-", "A", "a_b", "a.b", "a b", "x" * 101, "ä"):
        with pytest.raises(MurError) as err:
            validate_artifact_name(bad)
        assert err.value.code == "E-BLD-001"
        assert err.value.message.startswith(f"invalid artifact name '{bad}': ")


# --- `mur build DIR` through the real CLI (subprocess) ----------------------------------------


def _source(tmp_path: Path, manifest: str, files: dict[str, str] | None = None) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "murmur.yaml").write_text(manifest)
    for rel, body in (files or {}).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(body)
    return src


@pytest.mark.parametrize(
    "manifest, expected",
    [
        (
            'name: My_Tool\nversion: "1.0.0"\nruntime: skill\n',
            "error[E-BLD-001]: invalid artifact name 'My_Tool': may contain only lowercase letters, digits "
            "and '-' (found 'M')\n  hint: artifact names are lowercase letters, digits and inner hyphens, "
            "e.g. my-tool\n",
        ),
        (
            'name: tool\nversion: "1.0.0"\nexecution: docker\n',
            "error[E-MAN-003]: src/murmur.yaml: field 'execution' has invalid type (expected one of: wasm, "
            f"native, static, got docker)\n  hint: {FALLBACK_HINTS['E-MAN-003']}\n",
        ),
        ("name: tool\n", "error[E-MAN-001]: src/murmur.yaml: missing required field 'version'\n"
                         f"  hint: {FALLBACK_HINTS['E-MAN-001']}\n"),
    ],
    ids=["E-BLD-001", "execution-unknown", "version-missing"],
)
def test_mur_build_refuses(tmp_path, manifest, expected):
    home = tmp_path / "home"
    home.mkdir()
    _source(tmp_path, manifest, {"skill.md": "# s\n"})
    run = run_mur("build", "src", cwd=tmp_path, home=home)
    assert (run.code, run.out, run.err) == (1, "", expected)
    assert not list(tmp_path.rglob("*.mur.zip"))


def test_mur_build_skill_with_explicit_empty_requires_files(tmp_path):
    """`requires_files: []` opts a skill out of skill.md: the archive holds only murmur.yaml."""
    import zipfile

    home = tmp_path / "home"
    home.mkdir()
    _source(tmp_path, 'name: house-style\nversion: "1.0.0"\nruntime: skill\nrequires_files: []\n')
    run = run_mur("build", "src", cwd=tmp_path, home=home)
    assert (run.code, run.out, run.err) == (0, "Built artifact: src/house-style-1.0.0.mur.zip\n", "")
    archive = tmp_path / "src" / "house-style-1.0.0.mur.zip"
    assert zipfile.ZipFile(archive).namelist() == ["murmur.yaml"]
