"""`mur publish / install / list / doctor` in local mode, through the real CLI (in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mur.artifacts.lock import MurmurLock, lock_path, read_lock, write_lock


def write_skill(directory: Path, name="greet", version="0.1.0", body="# greet\n") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "murmur.yaml").write_text(f'name: {name}\nversion: "{version}"\nruntime: skill\n')
    (directory / "skill.md").write_text(body)
    return directory


def built(mur, directory: Path) -> Path:
    result = mur("build", str(directory))
    assert result.code == 0, result.err
    return Path(result.out.strip().removeprefix("Built artifact: "))


def write_capsule(root: Path, artifacts: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "murmur.yaml").write_text(f'name: cap\nversion: "0.1.0"\nartifacts:\n{artifacts}')
    return root


GREET = '  - name: greet\n    version: "0.1.0"\n    runtime: skill\n    local_source: false\n'


@pytest.fixture
def published(isolated, mur):
    """greet@0.1.0 built and published to the local registry (~/.murmur/artifacts)."""
    zip_path = built(mur, write_skill(isolated / "src" / "greet"))
    result = mur("publish", str(zip_path))
    assert (result.code, result.out, result.err) == (0, "Published greet@0.1.0\n", "")
    return zip_path


def test_publish_local_then_again_is_e_reg_003(isolated, mur, published):
    stored = isolated / "home/.murmur/artifacts/greet/0.1.0"
    assert sorted(p.name for p in stored.iterdir() if not p.name.startswith(".")) == [
        "greet-0.1.0.meta.json",
        "greet-0.1.0.mur.zip",
        "greet-0.1.0.sha256",
    ]
    result = mur("publish", str(published))
    assert result.code == 1
    assert result.err == (
        "error[E-REG-003]: artifact greet@0.1.0 already exists in registry\n"
        "  hint: use a new version string, or `mur unpublish greet@0.1.0` removes the existing one\n"
    )
    # The hint's command exists and does what it says: the same version can then be published again.
    result = mur("unpublish", "greet@0.1.0")
    assert (result.code, result.out) == (0, "Unpublished greet@0.1.0 from the local registry\n"), result.err
    assert not stored.exists() and not stored.parent.exists()
    assert mur("publish", str(published)).code == 0


def test_unpublish_refusals(isolated, mur, published):
    result = mur("unpublish", "greet")
    assert result.code == 1 and result.err.startswith("error[E-IO-003]: `mur unpublish` takes NAME@VERSION")
    result = mur("unpublish", "greet@9.9.9")
    assert result.code == 1 and result.err.startswith("error[E-REG-001]: artifact greet@9.9.9 is not in the local "
                                                      "registry")
    result = mur("unpublish", "greet@0.1.0", "--registry", "http://127.0.0.1:7800")
    assert result.code == 1 and "the registry API has no delete" in result.err


def test_uninstall_removes_from_the_project_store_and_unpins(isolated, mur, published):
    project = write_capsule(isolated / "proj", GREET)
    assert mur("install", "greet@0.1.0", cwd=project).code == 0
    assert read_lock(lock_path(project)).entry("greet") is not None
    result = mur("uninstall", "greet", "--json", cwd=project)
    assert result.code == 0, result.err
    assert json.loads(result.out) == {"name": "greet", "versions": ["0.1.0"], "scope": "project",
                                      "store": str(project / ".murmur/artifacts"), "unpinned": True}
    assert not (project / ".murmur/artifacts/greet").exists()
    assert read_lock(lock_path(project)).entry("greet") is None
    assert (isolated / "home/.murmur/artifacts/greet/0.1.0").is_dir()  # the global store is another store
    result = mur("uninstall", "greet", cwd=project)
    assert result.code == 1 and result.err.startswith("error[E-REG-001]: artifact greet is not in the project store")
    result = mur("uninstall", "-g", "greet@0.1.0", cwd=project)
    assert (result.code, result.out) == (0, f"Uninstalled greet@0.1.0 from the global store\n")
    assert mur("list", "--all", "--json", cwd=project).out == "[]\n"


def test_publish_default_path_comes_from_cwd_manifest(isolated, mur):
    src = write_skill(isolated / "src" / "greet")
    result = mur("publish", cwd=src)
    assert result.code == 1
    assert result.err.startswith(
        f"error[E-IO-001]: default artifact path {src}/greet-0.1.0.mur.zip not found. "
        "Run 'mur build' first or pass an explicit artifact path.\n"
    )
    built(mur, src)
    assert mur("publish", cwd=src).out == "Published greet@0.1.0\n"


@pytest.mark.parametrize("version", ["latest", "stable", "edge", "Stable"])
def test_reserved_versions_are_refused(isolated, mur, version):
    zip_path = built(mur, write_skill(isolated / "src", version=version))
    result = mur("publish", str(zip_path))
    assert result.code == 1
    assert result.err == (
        f"error[E-REG-004]: version '{version}' is reserved and cannot be published\n"
        "  hint: reserved strings: latest, stable, edge \u2014 use an explicit semver version\n"
    )
    assert not (isolated / "home/.murmur/artifacts").exists()


def test_publish_unreadable_inputs(isolated, mur):
    result = mur("publish", str(isolated / "missing.mur.zip"))
    assert result.err == (f"error[E-IO-003]: failed to read artifact at {isolated}/missing.mur.zip: No such file or directory\n"
                          "  hint: it does not exist: check the path (a relative one is read from the current directory)\n")
    junk = isolated / "junk.mur.zip"
    junk.write_bytes(b"not a zip")
    result = mur("publish", str(junk))
    assert result.err.startswith(f"error[E-IO-003]: failed to parse murmur.yaml in {junk}: invalid artifact archive at <bytes>: ")


def test_remote_mode_needs_the_api_key(isolated, mur, published):
    result = mur("publish", str(published), "--registry", "http://127.0.0.1:9")
    assert result.code == 1
    assert result.err == (
        "error[E-IO-003]: NEXUS_API_KEY is required for remote registry mode. Set it or use local mode.\n"
        "  hint: export NEXUS_API_KEY=<key>, or pass --registry local\n"
    )
    project = write_capsule(isolated / "proj", GREET)
    (project / "murmur.yaml").write_text((project / "murmur.yaml").read_text() + "registry:\n  default: remote\n")
    result = mur("install", "greet@0.1.0", cwd=project)
    assert result.err.startswith("error[E-IO-003]: NEXUS_API_KEY is required for remote registry mode.")
    (project / "murmur.yaml").write_text((project / "murmur.yaml").read_text().replace("remote\n", "bogus\n"))
    result = mur("install", "greet@0.1.0", cwd=project)
    assert result.err == ("error[E-IO-003]: invalid registry.default 'bogus' (expected local|remote)\n"
                          "  hint: set registry.default in the project's murmur.yaml to local or remote\n")


def test_install_into_project_pins_the_lock(isolated, mur, published):
    project = write_capsule(isolated / "proj", GREET)
    (project / "sub").mkdir()
    result = mur("install", "greet@0.1.0", cwd=project / "sub")  # project root found walking up
    zip_path = project / ".murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip"
    assert (result.code, result.err) == (0, "")
    assert result.out == f"Installed greet@0.1.0 \u2192 {zip_path}\n"
    lock = read_lock(lock_path(project))
    assert [(e.name, e.resolved_version) for e in lock.artifacts] == [("greet", "0.1.0")]
    assert lock.artifacts[0].sha256 == (isolated / "home/.murmur/artifacts/greet/0.1.0/greet-0.1.0.sha256").read_text()

    listing = mur("list", cwd=project)
    assert listing.out == "NAME   VERSION  RUNTIME  PLATFORMS\ngreet  0.1.0    skill    \u2014\n"
    rows = json.loads(mur("list", "--json", cwd=project).out)
    assert rows == [
        {
            "scope": "project",
            "name": "greet",
            "version": "0.1.0",
            "runtime": "skill",
            "execution": "static",
            "platforms": [],
            "path": str(zip_path),
        }
    ]
    both = mur("list", "--all", cwd=project).out.splitlines()
    assert both == [
        "SCOPE    NAME   VERSION  RUNTIME  PLATFORMS",
        "project  greet  0.1.0    skill    \u2014",
        "global   greet  0.1.0    skill    \u2014",
    ]
    assert mur("list", "-g", cwd=project).out.splitlines()[1].startswith("greet  0.1.0")


def test_global_and_file_installs_never_touch_the_lock(isolated, mur, published):
    project = write_capsule(isolated / "proj", GREET)
    result = mur("install", "-g", "greet@0.1.0", cwd=project)
    assert result.out == "Installed greet@0.1.0 \u2192 ~/.murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip\n"
    assert not lock_path(project).exists()
    rel = Path("..") / published.relative_to(isolated)
    result = mur("install", str(rel), cwd=project)
    assert (result.code, result.out) == (0, f"Installed greet@0.1.0 from {rel}\n")
    assert (project / ".murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip").read_bytes() == published.read_bytes()
    assert not lock_path(project).exists()


def test_lock_conflict_is_refused_and_nothing_is_written(isolated, mur, published):
    project = write_capsule(isolated / "proj", GREET)
    pinned = MurmurLock()
    pinned.upsert("greet", "0.1.0", "0" * 64)
    write_lock(lock_path(project), pinned)
    before = lock_path(project).read_bytes()
    result = mur("install", "greet@0.1.0", cwd=project)
    sha = (isolated / "home/.murmur/artifacts/greet/0.1.0/greet-0.1.0.sha256").read_text()
    assert result.code == 1
    assert result.err == (
        f"error[E-REG-005]: murmur.lock conflict for 'greet': pinned greet@0.1.0 (sha256 {'0' * 64}), "
        f"but the registry now resolves greet@0.1.0 (sha256 {sha})\n"
        "  hint: if this is an intentional upgrade, remove the stale entry from murmur.lock before installing again\n"
    )
    assert lock_path(project).read_bytes() == before
    assert not (project / ".murmur/artifacts").exists()


def test_install_errors(isolated, mur, published):
    result = mur("install", "greet@0.1.0", cwd=isolated)  # no murmur.yaml anywhere up from here
    assert result.err == (
        "error[E-IO-001]: no project root found (no murmur.yaml in current or parent directories)\n"
        "  hint: use `mur install -g <ref>` to install into the global store instead\n"
    )
    project = write_capsule(isolated / "proj", GREET)
    result = mur("install", "greet@9.9.9", cwd=project)
    assert result.err == (
        "error[E-REG-001]: artifact greet@9.9.9 not found in registry\n"
        "  hint: run `mur publish` first, or check --registry / registry.remote_url in murmur.yaml\n"
    )
    result = mur("install", "greet@1@2", cwd=project)
    assert result.err == "error[E-IO-003]: artifact reference must be in the format <name@version>\n  hint: e.g. greet@0.1.0\n"
    result = mur("install", "github:o/r@v1", cwd=project)
    assert result.code == 1 and result.err.startswith("error[E-IO-003]: github sources are not available")
    result = mur("install", "nothing-here", cwd=project)
    assert result.err.startswith("error[E-REG-001]: artifact nothing-here not found in registry\n")
    # Refusals write nothing: no empty project store, no lock.
    assert sorted(p.name for p in project.iterdir()) == ["murmur.yaml"]


def test_a_failed_store_write_leaves_no_directories(isolated):
    """A write that fails in name@version directories it created removes them, lock file included."""
    from mur.artifacts.store import ArtifactMeta, Store
    from mur.errors import MurError

    store = Store(isolated / "proj" / ".murmur" / "artifacts")
    (isolated / "proj").mkdir()
    meta = ArtifactMeta("greet", "0.1.0", "wasm", "")
    with pytest.raises(MurError) as err:
        store.put(meta, "0" * 64, src_file=isolated / "missing.mur.zip", overwrite=True)
    assert err.value.code == "E-IO-003"
    assert list((isolated / "proj").iterdir()) == []
    # A version directory that existed before keeps existing (another version's files are not ours).
    (store.root / "greet" / "0.1.0").mkdir(parents=True)
    with pytest.raises(MurError):
        store.put(meta, "0" * 64, src_file=isolated / "missing.mur.zip", overwrite=True)
    assert (store.root / "greet" / "0.1.0").is_dir()


def test_bare_name_installs_the_highest_version(isolated, mur):
    for version in ("0.9.0", "0.10.0", "0.10.0-rc.1"):
        zip_path = built(mur, write_skill(isolated / "src" / version, version=version, body=version))
        assert mur("publish", str(zip_path)).code == 0
    project = write_capsule(isolated / "proj", GREET)
    result = mur("install", "greet", cwd=project)
    assert result.out == f"Installed greet@0.10.0 \u2192 {project}/.murmur/artifacts/greet/0.10.0/greet-0.10.0.mur.zip\n"
    assert read_lock(lock_path(project)).entry("greet").resolved_version == "0.10.0"


def test_install_without_ref_installs_the_manifest(isolated, mur, published):
    project = write_capsule(
        isolated / "proj",
        GREET
        + '  - name: missing-tool\n    version: "1.0.0"\n'
        + "  - name: house-style\n    source: ./skills/house-style.md\n    runtime: skill\n",
    )
    result = mur("install", cwd=project)
    assert result.code == 1
    assert result.out == (
        f"Installed greet@0.1.0 \u2192 {project}/.murmur/artifacts/greet/0.1.0/greet-0.1.0.mur.zip\n"
        "\n"
        "1 of 2 artifacts failed to install:\n"
        "\n"
        "  missing-tool@1.0.0\n"
        "    error[E-REG-001]: artifact missing-tool@1.0.0 not found in registry\n"
        "      hint: run `mur publish` first, or check --registry / registry.remote_url in murmur.yaml\n"
    )
    assert [e.name for e in read_lock(lock_path(project)).artifacts] == ["greet"]  # local source never locked
    empty = isolated / "empty"
    empty.mkdir()
    (empty / "murmur.yaml").write_text('name: cap\nversion: "0.1.0"\n')
    assert mur("install", cwd=empty).out == "No artifacts in manifest.\n"


def test_list_usage_and_empty(isolated, mur):
    result = mur("list", "-g", "--all")
    assert result.code == 2
    assert result.err.endswith("Error: the argument '--global' cannot be used with '--all'\n")
    assert mur("list").out == "No artifacts found.\n"
    assert mur("list", "--json").out == "[]\n"


def test_doctor_reports_each_problem_with_its_fix(isolated, mur, published):
    project = write_capsule(
        isolated / "proj",
        GREET + '  - name: absent\n    version: "2.0.0"\n    runtime: skill\n    local_source: false\n',
    )
    result = mur("doctor", cwd=project)
    assert result.code == 1
    assert result.out == (
        f"Checking {project}/murmur.yaml for " + _platform() + "...\n"
        "  \u2713  greet@0.1.0    global\n"
        "  \u2717  absent@2.0.0   missing   \u2014 not installed in the project or global store\n"
        "\n"
        "1 check passed, 1 error found.\n"
        "\n"
        "Fix: mur install absent@2.0.0\n"
    )
    write_capsule(project, GREET)
    assert mur("install", "greet@0.1.0", cwd=project).code == 0
    result = mur("doctor", cwd=project)
    assert (result.code, result.out.splitlines()[1:4]) == (
        0,
        ["  \u2713  greet@0.1.0   project, lock ok", "", "All checks passed."],
    )
    lock = read_lock(lock_path(project))
    lock.upsert("greet", "0.0.9", lock.entry("greet").sha256)
    write_lock(lock_path(project), lock)
    result = mur("doctor", cwd=project)
    assert result.code == 1
    assert (
        "murmur.lock version mismatch for 'greet': manifest requested 0.1.0, lock pinned 0.0.9" in result.out
    )
    assert "Fix: greet: remove the stale murmur.lock entry, then run mur install greet@0.1.0\n" in result.out


def _platform() -> str:
    from mur.artifacts.store import current_platform

    return current_platform()


def test_install_and_doctor_do_not_need_the_provider_key(isolated, mur, published, monkeypatch):
    """`api_key: ${KEY}` is resolved by the commands that call the provider, not by install/doctor."""
    monkeypatch.delenv("MUR_TEST_UNSET_KEY", raising=False)
    project = write_capsule(isolated / "proj", GREET)
    (project / "murmur.yaml").write_text(
        (project / "murmur.yaml").read_text()
        + "inference:\n  transport: http\n  model: m\n  api_key: ${MUR_TEST_UNSET_KEY}\n")
    assert mur("install", cwd=project).code == 0
    result = mur("doctor", cwd=project)
    assert result.code == 0 and "All checks passed." in result.out, result.out + result.err
    run = mur("run", "--manifest", "murmur.yaml", "--explain-scope", cwd=project)
    assert run.code == 1 and "references ${MUR_TEST_UNSET_KEY} but the environment variable is not set" in run.err
