"""`mur search` against a real `mur registry serve` process on 127.0.0.1: two published artifacts,
ranking and --json over `GET /v1/artifacts`, murmur.yaml's registry.remote_url, and refusals for a
wrong or missing NEXUS_API_KEY. Every `mur` here is a separate process (`python -m mur`)."""

from __future__ import annotations

import json
from pathlib import Path

from artifacts_registry_helpers import KEY, mur  # type: ignore[import-not-found]


def publish_skill(tmp: Path, home: Path, url: str, name: str, version: str, description: str) -> None:
    src = tmp / "src" / f"{name}-{version}"
    src.mkdir(parents=True)
    (src / "murmur.yaml").write_text(
        f'name: {name}\nversion: "{version}"\nruntime: skill\ndescription: {description}\n'
    )
    (src / "skill.md").write_text(f"# {name}\n")
    built = mur(["build", str(src)], cwd=tmp, home=home)
    assert built.code == 0, built.err
    zip_path = built.out.strip().removeprefix("Built artifact: ")
    published = mur(["publish", zip_path, "--registry", url], cwd=tmp, home=home, NEXUS_API_KEY=KEY)
    assert (published.code, published.out) == (0, f"Published {name}@{version}\n"), published.err


def test_search_a_live_registry(tmp_path, registry):
    author = tmp_path / "author"
    user = tmp_path / "user"
    author.mkdir()
    user.mkdir()
    publish_skill(tmp_path, author, registry.url, "greet", "0.1.0", "Say hello to a person")
    publish_skill(tmp_path, author, registry.url, "weather", "1.2.0", "Forecasts, and a greeting about the weather")

    result = mur(["search", "GREET", "--registry", registry.url], cwd=tmp_path, home=user, NEXUS_API_KEY=KEY)
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        "NAME     VERSION  RUNTIME  DESCRIPTION\n"
        "greet    0.1.0    skill    Say hello to a person\n"
        "weather  1.2.0    skill    Forecasts, and a greeting about the weather\n"
    )

    result = mur(["search", "forecast", "--registry", registry.url, "--json"], cwd=tmp_path, home=user,
                 NEXUS_API_KEY=KEY)
    assert result.out.count("\n") == 1
    assert json.loads(result.out) == [
        {"name": "weather", "version": "1.2.0", "runtime": "skill",
         "description": "Forecasts, and a greeting about the weather", "tags": [], "platforms": []}
    ]

    result = mur(["search", "greet", "--registry", registry.url, "--limit", "1"], cwd=tmp_path, home=user,
                 NEXUS_API_KEY=KEY)
    assert result.out.splitlines() == [
        "NAME   VERSION  RUNTIME  DESCRIPTION",
        "greet  0.1.0    skill    Say hello to a person",
    ]

    result = mur(["search", "kubernetes", "--registry", registry.url], cwd=tmp_path, home=user, NEXUS_API_KEY=KEY)
    assert (result.code, result.out) == (0, "No results found.\n")


def test_newest_version_first_and_install_agrees(tmp_path, registry):
    author = tmp_path / "author"
    user = tmp_path / "user"
    author.mkdir()
    user.mkdir()
    for version in ("0.9.0", "0.10.0", "0.10.0-rc.1"):
        publish_skill(tmp_path, author, registry.url, "greet", version, f"greet {version}")
    result = mur(["search", "greet", "--registry", registry.url], cwd=tmp_path, home=user, NEXUS_API_KEY=KEY)
    assert [line.split()[1] for line in result.out.splitlines()[1:]] == ["0.10.0", "0.10.0-rc.1", "0.9.0"]
    installed = mur(["install", "-g", "greet", "--registry", registry.url], cwd=tmp_path, home=user, NEXUS_API_KEY=KEY)
    assert installed.out.startswith("Installed greet@0.10.0 "), installed.err


def test_murmur_yaml_remote_url_is_searched_without_registry(tmp_path, registry):
    author = tmp_path / "author"
    user = tmp_path / "user"
    author.mkdir()
    user.mkdir()
    publish_skill(tmp_path, author, registry.url, "greet", "0.1.0", "Say hello")
    project = tmp_path / "project"
    project.mkdir()
    (project / "murmur.yaml").write_text(
        f'name: cap\nversion: "0.1.0"\nartifacts: []\nregistry:\n  remote_url: {registry.url}\n'
    )
    result = mur(["search", "greet", "--json"], cwd=project, home=user, NEXUS_API_KEY=KEY)
    assert (result.code, result.err) == (0, "")
    assert [row["name"] for row in json.loads(result.out)] == ["greet"]


def test_wrong_or_missing_key_is_refused(tmp_path, registry):
    author = tmp_path / "author"
    user = tmp_path / "user"
    author.mkdir()
    user.mkdir()
    publish_skill(tmp_path, author, registry.url, "greet", "0.1.0", "Say hello")

    result = mur(["search", "greet", "--registry", registry.url], cwd=tmp_path, home=user, NEXUS_API_KEY="wrong-key")
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"error[E-IO-003]: registry error: registry authentication failed for {registry.url}. "
        "Check NEXUS_API_KEY and try again.\n"
        "  hint: export NEXUS_API_KEY with the key `mur registry serve` was started with\n"
    )

    result = mur(["search", "greet", "--registry", registry.url], cwd=tmp_path, home=user)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "error[E-IO-003]: NEXUS_API_KEY is required for remote registry mode. Set it or use local mode.\n"
        "  hint: export NEXUS_API_KEY=<key>, or pass --registry local\n"
    )
    assert "Traceback" not in result.err


def test_a_stopped_registry_is_e_io_003(tmp_path, registry):
    registry.proc.terminate()
    registry.proc.wait(10)
    result = mur(["search", "greet", "--registry", registry.url], cwd=tmp_path, home=tmp_path, NEXUS_API_KEY=KEY)
    assert result.code == 1
    assert result.err.startswith(f"error[E-IO-003]: registry error: failed to list artifacts from {registry.url}: ")
    assert "Traceback" not in result.err
