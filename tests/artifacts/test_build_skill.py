"""`mur build --skill`: package a skill directory or .zip holding SKILL.md, through the real CLI."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from mur.artifacts.package import ArtifactArchive
from mur.artifacts.skillbuild import infer_skill_name, resolve_skill_args
from mur.cli.build import skill_value_explicit

from mur_cli import Result, run_mur
from mur.errors import FALLBACK_HINTS

IO1_HINT = FALLBACK_HINTS["E-IO-001"]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def mur(home):
    """mur(*args, cwd, **env) runs the CLI in-process with HOME in tmp_path and nothing of NEXUS_*,
    MURMUR_*, MUR_* inherited from the machine."""

    def run(*args: str, cwd: Path, **extra_env: str) -> Result:
        env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("NEXUS_", "MURMUR_", "MUR_"))}
        env.update(HOME=str(home), MUR_NO_PROGRESS="1", **extra_env)
        return run_mur(*args, cwd=cwd, env=env)

    return run


def make_skill(directory: Path, files: dict[str, str] | None = None, skill_file: str = "SKILL.md") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / skill_file).write_text("# Greet\nSay hello.\n")
    for name, text in (files or {}).items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory


def built_path(result: Result) -> Path:
    assert (result.code, result.err) == (0, ""), result.err
    assert result.out.startswith("Built artifact: ") and result.out.endswith("\n")
    return Path(result.out[len("Built artifact: ") : -1])


def entries(zip_path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(zip_path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def names(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.namelist()


def generated(name: str, version: str = "0.1.0", files: tuple[str, ...] = (), description: str | None = None) -> str:
    text = f"name: {name}\nversion: '{version}'\nruntime: skill\n"  # upstream quotes the version
    if description is not None:
        text += f"description: {description}\n"
    return text + "requires_files:\n- skill.md\n" + "".join(f"- {f}\n" for f in files)


# --- argument forms ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "cwd", "expected_name"),
    [
        (["--skill"], "work/greet-skill", "greet-skill"),  # SOURCE defaults to `.`: its own name
        (["--skill", "my-name", "./greet-skill"], "work", "my-name"),
        (["./greet-skill", "--skill"], "work", "greet-skill"),
        (["--skill", "./greet-skill"], "work", "greet-skill"),
        (["--skill", "my-name"], "work/greet-skill", "my-name"),  # a name value, SOURCE `.`
        (["--skill", "--summary", "Hi", "greet-skill"], "work", "greet-skill"),  # an option is no value
    ],
)
def test_argument_forms(tmp_path, mur, args, cwd, expected_name):
    make_skill(tmp_path / "work/greet-skill")
    result = mur("build", *args, cwd=tmp_path / cwd)
    path = built_path(result)
    assert path == tmp_path / cwd / f"{expected_name}-0.1.0.mur.zip"
    manifest = ArtifactArchive(path.read_bytes()).manifest()
    assert (manifest.name, manifest.version, manifest.runtime) == (expected_name, "0.1.0", "skill")


def test_skill_value_rewrite():
    assert skill_value_explicit(["--skill"]) == ["--skill="]
    assert skill_value_explicit(["--skill", "n", "d"]) == ["--skill=n", "d"]
    assert skill_value_explicit(["d", "--skill"]) == ["d", "--skill="]
    assert skill_value_explicit(["--skill", "-o", "x.mur.zip"]) == ["--skill=", "-o", "x.mur.zip"]
    assert skill_value_explicit(["-o", "--skill"]) == ["-o", "--skill"]  # -o's value, not the option
    assert skill_value_explicit(["--", "--skill"]) == ["--", "--skill"]
    assert skill_value_explicit(["--skill=x"]) == ["--skill=x"]


def test_value_classification():
    assert resolve_skill_args("", "src") == (None, "src")
    assert resolve_skill_args("my-name", "src") == ("my-name", "src")
    for path in ("./x", "a/b", "a\\b", ".hidden", "../up"):
        assert resolve_skill_args(path, "src") == (None, path)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("My Skill.zip", "my-skill"),
        ("---/", "skill"),
        ("/", "skill"),
        ("dir/Cool_Tool.ZIP", "cool-tool"),
        ("a  b__c--d", "a-b-c-d"),
        ("-Édition 2-", "dition-2"),
        ("x" * 99 + "-yy", "x" * 99),  # truncated to 100, then the trailing '-' dropped
    ],
)
def test_name_inference(path, expected):
    assert infer_skill_name(path) == expected


def test_dot_infers_from_the_directory_name(tmp_path, monkeypatch):
    monkeypatch.chdir(make_skill(tmp_path / "Web Search"))
    assert infer_skill_name(".") == infer_skill_name("./") == "web-search"


def test_inferred_names_from_awkward_paths(tmp_path, mur):
    make_skill(tmp_path / "---")
    assert built_path(mur("build", "--skill", "./---/", cwd=tmp_path)).name == "skill-0.1.0.mur.zip"
    with zipfile.ZipFile(tmp_path / "My Skill.zip", "w") as zf:
        zf.writestr("SKILL.md", "# s\n")
    path = built_path(mur("build", "--skill", "./My Skill.zip", cwd=tmp_path))
    assert path.name == "my-skill-0.1.0.mur.zip"
    assert entries(path)["murmur.yaml"].decode() == generated("my-skill")


# --- what gets packed -------------------------------------------------------------------------


@pytest.mark.parametrize("skill_file", ["SKILL.md", "Skill.Md", "skill.md"])
def test_skill_md_in_any_casing_is_stored_as_skill_md(tmp_path, mur, skill_file):
    make_skill(tmp_path / "s", skill_file=skill_file)
    path = built_path(mur("build", "--skill", "./s", cwd=tmp_path))
    assert entries(path) == {"murmur.yaml": generated("s").encode(), "skill.md": b"# Greet\nSay hello.\n"}


def test_two_skill_md_files_are_refused(tmp_path, mur):
    src = make_skill(tmp_path / "s")
    (src / "skill.md").write_text("other\n")
    result = mur("build", "--skill", "./s", cwd=tmp_path)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "error[E-BLD-002]: 'SKILL.md' and 'skill.md' in ./s both pack as the archive entry 'skill.md'\n"
        "  hint: keep only one of them\n"
    )


def test_extras_are_packed_and_listed_subdirectories_ignored(tmp_path, mur):
    extras = {"zeta.txt": "z\n", "Alpha.json": "{}\n", "sub/nested.md": "no\n", "sub/SKILL.md": "no\n"}
    src = make_skill(tmp_path / "s", extras)
    path = built_path(mur("build", "--skill", "./s", "--summary", "Greets people", cwd=tmp_path))
    assert names(path) == ["murmur.yaml", "skill.md", "Alpha.json", "zeta.txt"]
    assert entries(path)["murmur.yaml"].decode() == generated(
        "s", files=("Alpha.json", "zeta.txt"), description="Greets people"
    )
    assert entries(path)["zeta.txt"] == b"z\n"
    assert (src / "sub/nested.md").exists()


def test_earlier_build_outputs_are_not_packed(tmp_path, mur):
    src = make_skill(tmp_path / "s", {"notes.txt": "n\n"})
    first = built_path(mur("build", "--skill", cwd=src))
    assert first == src / "s-0.1.0.mur.zip"
    second = built_path(mur("build", "--skill", "--version", "0.2.0", cwd=src))
    assert names(second) == ["murmur.yaml", "skill.md", "notes.txt"]


def test_symlink_in_the_input_is_refused(tmp_path, mur):
    src = make_skill(tmp_path / "s", {"real.txt": "r\n"})
    (src / "link.txt").symlink_to("real.txt")
    result = mur("build", "--skill", "./s", cwd=tmp_path)
    assert result.code == 1
    assert result.err == (
        "error[E-BLD-002]: 'link.txt' in ./s is a symlink; --skill packs only regular files\n"
        "  hint: replace the link with a copy of the file it points to\n"
    )
    assert not list(tmp_path.glob("*.mur.zip"))


def test_zip_input_reads_root_entries_only(tmp_path, mur):
    with zipfile.ZipFile(tmp_path / "Pack.zip", "w") as zf:
        zf.writestr("skill.MD", "# zipped\n")
        zf.writestr("extra.txt", "e\n")
        zf.writestr("docs/", "")
        zf.writestr("docs/inner.md", "no\n")
        zf.writestr("win\\path.txt", "no\n")
    path = built_path(mur("build", "--skill", "--version", "1.0.0", "./Pack.zip", cwd=tmp_path))
    assert path == tmp_path / "pack-1.0.0.mur.zip"
    assert entries(path) == {
        "murmur.yaml": generated("pack", "1.0.0", files=("extra.txt",)).encode(),
        "skill.md": b"# zipped\n",
        "extra.txt": b"e\n",
    }


# --- an existing manifest ---------------------------------------------------------------------

OWN = '# my own manifest\nname: greet\nversion: "2.0.0"\nruntime: skill\ndescription: Old words\n'


def test_existing_manifest_is_kept_verbatim(tmp_path, mur):
    make_skill(tmp_path / "dir", {"MURMUR.yaml": OWN})
    path = built_path(mur("build", "--skill", "./dir", cwd=tmp_path))
    assert path == tmp_path / "greet-2.0.0.mur.zip"  # named by the manifest, not by the directory
    assert entries(path)["murmur.yaml"] == OWN.encode()


@pytest.mark.parametrize(
    ("args", "file_name", "expected"),
    [
        (["--summary", "New words"], "greet-2.0.0", {"name": "greet", "version": "2.0.0", "description": "New words"}),
        (["--skill", "hello"], "hello-2.0.0", {"name": "hello", "version": "2.0.0", "description": "Old words"}),
        (["--version", "3.1.0"], "greet-3.1.0", {"name": "greet", "version": "3.1.0", "description": "Old words"}),
    ],
)
def test_existing_manifest_overridden(tmp_path, mur, args, file_name, expected):
    make_skill(tmp_path / "dir", {"murmur.yaml": OWN})
    skill_args = args if args[0] == "--skill" else ["--skill", *args]
    path = built_path(mur("build", *skill_args, "./dir", cwd=tmp_path))
    assert path.name == f"{file_name}.mur.zip"
    text = entries(path)["murmur.yaml"].decode()
    assert "# my own manifest" not in text  # re-serialised
    manifest = ArtifactArchive(path.read_bytes()).manifest()
    assert {"name": manifest.name, "version": manifest.version, "description": manifest.description} == expected
    assert manifest.runtime == "skill"


def test_existing_manifest_gains_requires_files_for_extras(tmp_path, mur):
    make_skill(tmp_path / "dir", {"murmur.yaml": OWN + "requires_files: [b.txt]\n", "b.txt": "b\n", "a.txt": "a\n"})
    path = built_path(mur("build", "--skill", "./dir", cwd=tmp_path))
    manifest = ArtifactArchive(path.read_bytes()).manifest()
    assert manifest.requires_files == ("b.txt", "skill.md", "a.txt")
    assert names(path) == ["murmur.yaml", "skill.md", "a.txt", "b.txt"]


@pytest.mark.parametrize(
    ("runtime_line", "shown"), [("runtime: tool\n", "tool"), ("", ""), ("runtime: Skill\n", "Skill")]
)
def test_existing_manifest_with_another_runtime_is_refused(tmp_path, mur, runtime_line, shown):
    make_skill(tmp_path / "dir", {"murmur.yaml": f'name: greet\nversion: "1"\n{runtime_line}'})
    result = mur("build", "--skill", "./dir", cwd=tmp_path)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f'error[E-MAN-003]: murmur.yaml declares runtime: "{shown}" but --skill requires runtime: skill\n'
        "  hint: set `runtime: skill` in murmur.yaml, or build it without --skill\n"
    )


def test_declared_file_that_is_not_packed_is_refused(tmp_path, mur):
    declared = OWN + "requires_files: [skill.md, assets/logo.png]\n"
    make_skill(tmp_path / "dir", {"murmur.yaml": declared, "assets/logo.png": "x"})
    result = mur("build", "--skill", "./dir", cwd=tmp_path)
    assert result.code == 1
    assert result.err.startswith("error[E-IO-003]: missing required file 'assets/logo.png' in ./dir\n")


def test_literal_secret_in_the_manifest_warns(tmp_path, mur):
    make_skill(tmp_path / "dir", {"murmur.yaml": OWN + "api_token: sk-abcdefghijkl\n"})
    result = mur("build", "--skill", "./dir", cwd=tmp_path)
    assert result.code == 0
    assert result.err.startswith(
        "warning[W-SEC-004]: murmur.yaml: field 'api_token' appears to contain a literal secret value\n"
    )


# --- failures -----------------------------------------------------------------------------------


def test_missing_skill_md(tmp_path, mur):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty/sub").mkdir()
    (tmp_path / "empty/sub/SKILL.md").write_text("nested does not count\n")
    result = mur("build", "--skill", "./empty", cwd=tmp_path)
    assert (result.code, result.out) == (1, "")
    assert result.err == ("error[E-IO-001]: SKILL.md not found in ./empty (case-insensitive search found no match)\n"
                          f"  hint: {IO1_HINT}\n")
    with zipfile.ZipFile(tmp_path / "x.zip", "w") as zf:
        zf.writestr("README.md", "r\n")
    result = mur("build", "--skill", "./x.zip", cwd=tmp_path)
    assert result.err == ("error[E-IO-001]: SKILL.md not found in zip ./x.zip (case-insensitive search found no match)\n"
                          f"  hint: {IO1_HINT}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "home", "x.zip"]


def test_invalid_explicit_name(tmp_path, mur):
    make_skill(tmp_path / "s")
    result = mur("build", "--skill", "My_Skill", "./s", cwd=tmp_path)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "error[E-BLD-001]: invalid artifact name 'My_Skill': may contain only lowercase letters, digits and '-' "
        "(found 'M')\n"
        "  hint: artifact names are lowercase letters, digits and inner hyphens, e.g. my-tool\n"
    )
    assert not list(tmp_path.glob("*.mur.zip"))


def test_bad_versions_and_options(tmp_path, mur):
    make_skill(tmp_path / "s")
    result = mur("build", "--skill", "--version", "../x", "./s", cwd=tmp_path)
    assert result.code == 1
    assert result.err.startswith("error[E-IO-003]: invalid artifact version '../x': a version must be one path segment")
    result = mur("build", "--version", "1.0.0", "./s", cwd=tmp_path)
    assert result.code == 2
    assert "--version is only valid with --skill" in result.err
    result = mur("build", "--skill", "./s", "-o", "out.zip", cwd=tmp_path)
    assert result.err == "error[E-IO-003]: output path must end with .mur.zip: out.zip\n  hint: give an output path ending in .mur.zip\n"
    assert not list(tmp_path.glob("*.zip"))


def test_versions_yaml_would_misread_are_quoted(tmp_path, mur):
    make_skill(tmp_path / "s")
    path = built_path(mur("build", "--skill", "./s", "--version", "1e5", "--summary", "0o17", cwd=tmp_path))
    assert path.name == "s-1e5.mur.zip"
    manifest = ArtifactArchive(path.read_bytes()).manifest()
    assert (manifest.version, manifest.description) == ("1e5", "0o17")


# --- determinism and round trips ----------------------------------------------------------------


def test_same_input_gives_same_bytes_and_matches_a_plain_build(tmp_path, mur):
    src = make_skill(tmp_path / "s", {"b.txt": "b\n", "a.txt": "a\n"})
    first = built_path(mur("build", "--skill", "./s", "-o", "one.mur.zip", cwd=tmp_path))
    for f in src.iterdir():
        os.utime(f, (1_000_000, 1_000_000))
    (src / "a.txt").chmod(0o600)
    second = built_path(mur("build", "--skill", "./s", "-o", "two.mur.zip", cwd=tmp_path))
    assert (tmp_path / first).read_bytes() == (tmp_path / second).read_bytes()

    # Unpacked, the artifact is a plain `mur build` source that packs back to the same bytes.
    unpacked = tmp_path / "unpacked"
    ArtifactArchive((tmp_path / first).read_bytes()).extract_all(unpacked)
    plain = built_path(mur("build", str(unpacked), "-o", str(tmp_path / "plain.mur.zip"), cwd=tmp_path))
    assert plain.read_bytes() == (tmp_path / first).read_bytes()


def test_built_skill_publishes_and_installs(tmp_path, mur, home):
    make_skill(tmp_path / "greet", {"examples.md": "e\n"})
    path = built_path(mur("build", "--skill", "./greet", "--version", "1.2.0", cwd=tmp_path))
    archive = ArtifactArchive(path.read_bytes())
    assert archive.manifest().registry_runtime == "static"

    result = mur("publish", str(path), cwd=tmp_path)
    assert (result.code, result.out, result.err) == (0, "Published greet@1.2.0\n", "")
    result = mur("install", "-g", "greet@1.2.0", cwd=tmp_path)
    assert result.code == 0, result.err
    stored = home / ".murmur/artifacts/greet/1.2.0/greet-1.2.0.mur.zip"
    assert stored.read_bytes() == path.read_bytes()
    listing = mur("list", "-g", cwd=tmp_path)
    assert listing.out.splitlines()[1].split() == ["greet", "1.2.0", "skill", "\u2014"]

    project = tmp_path / "proj"
    project.mkdir()
    (project / "murmur.yaml").write_text(
        'name: cap\nversion: "0.1.0"\nartifacts:\n  - name: greet\n    version: "1.2.0"\n    runtime: skill\n'
    )
    result = mur("install", str(path), cwd=project)
    assert (result.code, result.err) == (0, "")
    assert (project / ".murmur/artifacts/greet/1.2.0/greet-1.2.0.mur.zip").read_bytes() == path.read_bytes()


def test_zip_input_is_never_extracted_and_ceiling_applies(tmp_path, mur):
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("SKILL.md", "# s\n")
        zf.writestr("big.bin", b"\0" * 4096)
    (tmp_path / "s.zip").write_bytes(data.getvalue())
    result = mur("build", "--skill", "./s.zip", cwd=tmp_path, MURMUR_MAX_ARTIFACT_DECOMPRESSED_BYTES="1000")
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "error[E-IO-003]: cannot read zip ./s.zip: zip entry 'big.bin' exceeds the 1000-byte decompression ceiling\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "s.zip"]
    assert built_path(mur("build", "--skill", "./s.zip", cwd=tmp_path)).name == "s-0.1.0.mur.zip"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "s-0.1.0.mur.zip", "s.zip"]
