"""The shared resolve step: one ResolvedCapsule for `mur run` and `mur deploy`, one error per cause."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mur.errors import MurError
from mur.manifest import load_capsule
from mur.resolve.capsule import resolve_capsule, resolve_loaded

HINT = "pass --env {var}=..."
GHOST = 'artifacts:\n  - name: ghost\n    version: "1.0.0"\n    runtime: skill\n    local_source: false\n'


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def capsule(d: Path, body: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "murmur.yaml").write_text('name: c\nversion: "1.0.0"\n' + body)
    return d / "murmur.yaml"


def test_a_missing_artifact_is_the_same_error_for_run_and_deploy(tmp_path):
    m = capsule(tmp_path / "cap", GHOST)
    with pytest.raises(MurError) as deploy_err:
        resolve_capsule(m, env={}, hint=HINT)
    with pytest.raises(MurError) as run_err:
        resolve_loaded(load_capsule(m))
    assert deploy_err.value.code == run_err.value.code == "E-RUN-008"
    assert deploy_err.value.message == run_err.value.message
    assert "mur install ghost@1.0.0" in deploy_err.value.hint


def test_files_artifacts_and_env_references_are_recorded(tmp_path):
    d = tmp_path / "cap"
    m = capsule(d, "inference:\n  transport: http\n  model: m\n  api_key: ${MY_KEY}\n  system_prompt_file: p/sys.md\n"
                   "artifacts:\n  - name: style\n    source: ./skills/style/\n    runtime: skill\n")
    (d / "p").mkdir()
    (d / "p" / "sys.md").write_text("be brief")
    (d / "skills" / "style").mkdir(parents=True)
    (d / "skills" / "style" / "SKILL.md").write_text("# style")
    (d / "murmur.lock").write_text("lock_version: 1\nartifacts: []\n")
    with pytest.raises(MurError) as err:
        resolve_capsule(m, env={}, hint=HINT)
    assert err.value.code == "E-MAN-003" and "references ${MY_KEY}" in err.value.message
    assert err.value.hint == "pass --env MY_KEY=..."
    r = resolve_capsule(m, env={"MY_KEY": "k"}, hint=HINT)
    assert dict(r.env_refs) == {"inference.api_key": "MY_KEY"}
    assert r.loaded.api_key is None  # deploy never holds the provider key
    assert sorted(f.rel for f in r.files) == ["murmur.lock", "p/sys.md"]
    style = r.artifacts["style"]
    assert style.kind == "local" and style.path.name == "SKILL.md"
    assert [(f.rel, f.origin) for f in style.files] == [("skills/style/SKILL.md", "artifacts[style].source")]
    assert all(len(f.sha256) == 64 for f in (*r.files, *style.files))
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.files = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        r.artifacts["x"] = style  # type: ignore[index]


def test_files_outside_the_manifest_dir_and_unreadable_ones(tmp_path):
    outside = tmp_path / "elsewhere.md"
    outside.write_text("x")
    m = capsule(tmp_path / "cap", f"inference:\n  transport: http\n  model: m\n  system_prompt_file: {outside}\n"
                                 "  compaction:\n    system_prompt_file: gone.md\n")
    r = resolve_capsule(m, env={}, hint=HINT)
    ref = next(f for f in r.files if f.origin == "inference.system_prompt_file")
    assert ref.rel is None and ref.src == str(outside)  # a run reads it; a deploy refuses to upload it
    assert [(f, p.name) for f, p, _why in r.missing] == [("inference.compaction.system_prompt_file", "gone.md")]
