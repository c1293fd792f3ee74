"""What deploy ships: referenced files, artifacts, env precedence and ${VAR} references, lifecycle policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from mur.resolve.shipped import ship
from mur.errors import MurError


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()


def write(d: Path, text: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "murmur.yaml").write_text(text)
    return d / "murmur.yaml"


PROC = 'inference:\n  transport: process\n  model: m\n'


def test_referenced_files_keep_their_relative_paths(tmp_path):
    d = tmp_path / "cap"
    m = write(d, 'name: c\nversion: "1"\n' + PROC + "  system_prompt_file: prompts/sys.md\n")
    (d / "prompts").mkdir()
    (d / "prompts" / "sys.md").write_text("be brief")
    (d / "murmur.lock").write_text("lock_version: 1\nartifacts: []\n")
    inp = ship(m)
    assert sorted(f.rel for f in inp.files) == ["murmur.lock", "prompts/sys.md"]
    assert inp.manifest.rel == "murmur.yaml" and len(inp.manifest.sha256) == 64


def test_files_outside_the_manifest_dir_are_refused(tmp_path):
    (tmp_path / "outside.md").write_text("x")
    m = write(tmp_path / "cap", 'name: c\nversion: "1"\n' + PROC + "  system_prompt_file: ../outside.md\n")
    with pytest.raises(MurError) as err:
        ship(m)
    assert err.value.code == "E-DEPLOY-001" and "outside the manifest directory" in err.value.message


def test_missing_prompt_file_and_missing_artifact(tmp_path):
    m = write(tmp_path / "a", 'name: c\nversion: "1"\n' + PROC + "  system_prompt_file: nope.md\n")
    with pytest.raises(MurError) as err:
        ship(m)
    assert err.value.code == "E-IO-001"
    m = write(tmp_path / "b", 'name: c\nversion: "1"\n' + PROC + "artifacts:\n  - name: ghost\n    version: 1.0.0\n")
    with pytest.raises(MurError) as err:
        ship(m)
    # the same code `mur run` gives for it (the shared resolve step)
    assert err.value.code == "E-RUN-008" and "mur install ghost@1.0.0" in err.value.hint


def test_local_source_artifacts_and_the_capsule_component_are_uploaded(tmp_path):
    d = tmp_path / "cap"
    m = write(d, 'name: c\nversion: "1"\nartifacts:\n  - name: greet\n    runtime: tool\n    source: ./greet\n    local_source: true\n')
    (d / "greet").mkdir()
    (d / "greet" / "murmur.yaml").write_text("name: greet\nversion: 0.1.0\n")
    (d / "greet" / "greet.wasm").write_bytes(b"\0asm")
    (d / "capsule.wasm").write_bytes(b"\0asm")
    rels = sorted(f.rel for f in ship(m).files)
    assert rels == ["capsule.wasm", "greet/greet.wasm", "greet/murmur.yaml"]


def test_env_precedence(tmp_path):
    d = tmp_path / "cap"
    m = write(d, 'name: c\nversion: "1"\n' + PROC)
    (d / ".env").write_text("FROM=dotenv\n")
    (tmp_path / "other.env").write_text("FROM=file\n")
    assert ship(m).env == {"FROM": "dotenv"}
    assert ship(m, env_file=tmp_path / "other.env").env == {"FROM": "file"}
    assert ship(m, env_args=["FROM=flag"], env_file=tmp_path / "other.env").env == {"FROM": "flag"}
    with pytest.raises(MurError) as err:
        ship(m, env_args=["bad"])
    assert err.value.code == "E-DEPLOY-001"


def test_a_one_task_lifecycle_is_served_as_a_queue(tmp_path):
    m = write(tmp_path / "a", 'name: c\nversion: "1"\n' + PROC)
    inp = ship(m)
    assert inp.run_args == ("--lifecycle-task-acceptance", "queue", "--lifecycle-after-task", "sleep")
    assert inp.restart_policy == "on-failure" and any("queue" in n for n in inp.notes())
    kept = ship(m, keep_lifecycle=True)
    assert kept.run_args == () and kept.restart_policy == "always"
    m = write(tmp_path / "b", 'name: c\nversion: "1"\n' + PROC + "lifecycle:\n  task_acceptance: queue\n  after_task: sleep\n")
    inp = ship(m)
    assert inp.long_lived and inp.run_args == () and inp.restart_policy == "on-failure" and not inp.notes()


def test_workdir_seed(tmp_path):
    m = write(tmp_path / "cap", 'name: c\nversion: "1"\n' + PROC)
    seed = tmp_path / "seed"
    (seed / "bin").mkdir(parents=True)
    (seed / "bin" / "run.sh").write_text("#!/bin/sh\n")
    (seed / "bin" / "run.sh").chmod(0o755)
    (seed / "task.md").write_text("hi")
    refs = {f.rel: f for f in ship(m, workdir=seed).workdir}
    assert set(refs) == {"bin/run.sh", "task.md"} and refs["bin/run.sh"].mode == 0o755
    with pytest.raises(MurError) as err:
        ship(m, workdir=tmp_path / "none")
    assert err.value.code == "E-IO-001"


def test_env_satisfies_the_manifests_references_not_the_shell(tmp_path, monkeypatch):
    """`api_key: ${KEY}` is satisfied by the deployment's env (what the target will see), with the
    documented precedence; the deploying shell's variable alone is not enough, and not needed."""
    d = tmp_path / "cap"
    m = write(d, 'name: c\nversion: "1"\ninference:\n  transport: http\n  model: m\n  api_key: ${PROVIDER_KEY}\n')
    monkeypatch.delenv("PROVIDER_KEY", raising=False)
    assert ship(m, env_args=["PROVIDER_KEY=sk-1"]).env == {"PROVIDER_KEY": "sk-1"}
    monkeypatch.setenv("PROVIDER_KEY", "from-the-shell")
    with pytest.raises(MurError) as err:
        ship(m)
    assert err.value.code == "E-MAN-003" and "references ${PROVIDER_KEY}" in err.value.message
    assert "--env PROVIDER_KEY=" in err.value.hint and "not sent" in err.value.hint
    (d / ".env").write_text("PROVIDER_KEY=sk-dotenv\n")
    assert ship(m).env == {"PROVIDER_KEY": "sk-dotenv"}
    with pytest.raises(MurError):  # --env replaces .env (alternatives, not merged)
        ship(m, env_args=["OTHER=1"])


def test_project_config_release_source_is_the_capsules(tmp_path, monkeypatch):
    d = tmp_path / "cap"
    m = write(d, 'name: c\nversion: "1"\n' + PROC)
    (d / ".murmur").mkdir()
    (d / ".murmur" / "config.yaml").write_text("deploy:\n  release_source: /srv/releases\n")
    monkeypatch.chdir(tmp_path)  # deploy run from elsewhere: the capsule's project config still applies
    assert ship(m).release_source == "/srv/releases"


def test_image_build_takes_the_release_source_deploy_takes(tmp_path, monkeypatch):
    """`mur image build` without --release-source reads the capsule project's config, as deploy does."""
    from mur.image.build import BuildOptions, _runtime
    from mur.image.types import QUIET

    d = tmp_path / "cap"
    m = write(d, 'name: c\nversion: "1"\nmur_version: "9.9.9"\n' + PROC)
    releases = tmp_path / "releases"
    releases.mkdir()
    (d / ".murmur").mkdir()
    (d / ".murmur" / "config.yaml").write_text(f"deploy:\n  release_source: {releases}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MurError) as err:  # the pinned runtime is looked for there (and is not there)
        _runtime(ship(m), "linux-x86_64", BuildOptions(), QUIET)
    assert f"from release source {releases}" in err.value.message, err.value.render()


def test_a_capsule_directory_ships_as_its_murmur_yaml(tmp_path):
    """`-m DIR` means DIR/murmur.yaml for deploy, image and export as for run: the same capsule, the
    same .env beside it; a directory without one is the manifest's own E-IO-001, with its hint."""
    d = tmp_path / "cap"
    m = write(d, 'name: c\nversion: "1"\n' + PROC + "  system_prompt: ${GREETING}\n")
    (d / ".env").write_text("GREETING=hi\n")
    by_dir, by_file = ship(d), ship(m)
    assert by_dir.manifest == by_file.manifest and by_dir.env == by_file.env == {"GREETING": "hi"}
    (tmp_path / "empty").mkdir()
    with pytest.raises(MurError) as err:
        ship(tmp_path / "empty")
    assert err.value.code == "E-IO-001" and err.value.message.endswith("empty/murmur.yaml") and err.value.hint
