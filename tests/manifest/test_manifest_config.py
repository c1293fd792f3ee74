"""Config files: ~/.murmur/config.yaml (global) merged with <cwd>/.murmur/config.yaml (project).

HOME and cwd point at temp dirs (the `project` fixture), so the machine's own files never leak in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mur.errors import MurError, collect_warnings
from mur.manifest.config import load_config


def write(base: Path, text: str) -> Path:
    (base / ".murmur").mkdir(exist_ok=True)
    path = base / ".murmur" / "config.yaml"
    path.write_text(text)
    return path


def test_no_files_gives_the_builtin_default(project):
    cfg = load_config()
    assert cfg.files == []
    assert cfg.registry_default == "official"
    assert cfg.registry_sources == [{"name": "official", "type": "github", "repo": "murmur-nexus/default-artifacts"}]
    assert cfg.containment is None and cfg.inference == {} and cfg.beta_enabled == []


def test_a_global_file_replaces_the_builtin_default_wholesale(project):
    home, _ = project
    write(home, "registry:\n  index_url: https://idx.example.com\n")
    cfg = load_config()
    assert cfg.registry_default is None and cfg.registry_sources == []
    assert cfg.registry_index_url == "https://idx.example.com"


def test_project_scalars_win_when_non_empty(project):
    home, proj = project
    gpath = write(home, "registry:\n  default: g\n  index_url: https://g.example.com\n"
                        "inference:\n  provider: anthropic\n  model: g-model\n  endpoint: https://g.example.com\n")
    ppath = write(proj, "registry:\n  default: p\n  index_url: ''\ninference:\n  model: p-model\n")
    cfg = load_config()
    assert cfg.files == [gpath, ppath]
    assert (cfg.registry_default, cfg.registry_index_url) == ("p", "https://g.example.com")
    assert cfg.inference == {"provider": "anthropic", "model": "p-model", "endpoint": "https://g.example.com"}


def test_api_key_is_read_from_the_global_file_only(project):
    home, proj = project
    write(home, "inference:\n  api_key: global-key\n")
    ppath = write(proj, "inference:\n  api_key: sk-committed-by-mistake\n")
    with collect_warnings() as seen:
        cfg = load_config()
    assert cfg.inference["api_key"] == "global-key"
    assert seen == [("W-CFG-001", f"{ppath}: inference.api_key is read from ~/.murmur/config.yaml only; ignored here")]


def test_sources_union_by_name_project_replaces_in_place(project):
    home, proj = project
    write(home, "registry:\n  sources:\n    - {name: a, type: github, repo: o/a}\n    - {name: b, type: github, repo: o/b}\n")
    write(proj, "registry:\n  sources:\n    - {name: b, type: github, repo: p/b}\n    - {name: c, type: github, repo: p/c}\n")
    cfg = load_config()
    assert [(s["name"], s["repo"]) for s in cfg.registry_sources] == [("a", "o/a"), ("b", "p/b"), ("c", "p/c")]


def test_beta_enabled_is_a_union(project):
    home, proj = project
    write(home, "beta:\n  enabled: [x, y]\n")
    write(proj, "beta:\n  enabled: [y, z]\n")
    assert load_config().beta_enabled == ["x", "y", "z"]


@pytest.mark.parametrize(
    "global_value, project_value, expected",
    [
        (None, None, None),
        ("scoped", None, "scoped"),
        (None, "sealed", "sealed"),
        ("sealed", "advisory", "sealed"),  # strongest wins, never project-wins
        ("advisory", "scoped", "scoped"),
        ("scoped", "scoped", "scoped"),
    ],
)
def test_containment_is_strongest_wins(project, global_value, project_value, expected):
    home, proj = project
    if global_value:
        write(home, f"containment: {global_value}\n")
    if project_value:
        write(proj, f"containment: {project_value}\n")
    cfg = load_config()
    assert cfg.containment == expected
    if expected:
        owner = home if global_value == expected else proj
        assert cfg.containment_file == owner / ".murmur" / "config.yaml"


def test_project_file_is_read_from_the_cwd_only(project, monkeypatch):
    _, proj = project
    write(proj, "containment: sealed\n")
    sub = proj / "sub"
    sub.mkdir()
    monkeypatch.chdir(sub)
    assert load_config().containment is None  # no parent walk


def test_release_source_for_deploy(project):
    home, proj = project
    write(home, "deploy:\n  release_source: /srv/releases\n")
    assert load_config().release_source == "/srv/releases"
    write(proj, "deploy:\n  release_source: https://r.example.com\n")
    assert load_config().release_source == "https://r.example.com"


@pytest.mark.parametrize(
    "text, message",
    [
        ("containment: strict\n", "containment must be one of: advisory, scoped, sealed; got 'strict'"),
        ("registry: [a]\n", "'registry' must be a mapping"),
        ("inference:\n  model: 3\n", "'inference.model' must be a string"),
        ("beta:\n  enabled: yes\n", "'beta.enabled' must be a list of strings"),
        ("- just a list\n", "expected a mapping at the top level"),
        ("registry:\n  sources: [{repo: x}]\n", "each registry.sources entry must be a mapping with a name"),
    ],
)
def test_bad_config_is_e_cfg_003_naming_the_file(project, text, message):
    _, proj = project
    path = write(proj, text)
    with pytest.raises(MurError) as err:
        load_config()
    assert (err.value.code, err.value.message) == ("E-CFG-003", f"{path}: {message}")


def test_config_yaml_syntax_error_names_file_and_line(project):
    home, _ = project
    path = write(home, "registry:\n  default: [unclosed\n")
    with pytest.raises(MurError) as err:
        load_config()
    assert err.value.code == "E-CFG-003"
    assert err.value.message.startswith(f"{path}: YAML syntax error at line 3")


def test_config_containment_reaches_mur_run(project, monkeypatch):
    """End to end through the pre-checks: the project file raises the manifest's floor."""
    from manifest_support import SCOPED_HOST
    from mur.session import prechecks
    from mur.session.options import RunOptions

    home, proj = project
    write(proj, "containment: scoped\n")
    (proj / "murmur.yaml").write_text('name: c\nversion: "1"\ncapabilities:\n  containment: advisory\n')
    monkeypatch.setattr(prechecks, "probe", lambda: SCOPED_HOST)
    report = prechecks.explain(RunOptions(manifest=Path("murmur.yaml"), containment="advisory"))
    assert (report["declared_containment"], report["declared_source"]) == ("scoped", "config")


def test_a_removed_working_directory_holds_no_project_file(project, monkeypatch):
    """The cwd can vanish under a running shell; the global file still applies, nothing crashes."""
    home, _ = project
    write(home, "containment: scoped\n")

    def gone(cls=None):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(Path, "cwd", classmethod(gone))
    cfg = load_config()
    assert (cfg.containment, cfg.files) == ("scoped", [home / ".murmur" / "config.yaml"])


def test_no_home_directory_is_e_io_001(project, monkeypatch):
    def homeless(cls=None):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("HOME")
    monkeypatch.setattr(Path, "home", classmethod(homeless))
    with pytest.raises(MurError) as err:
        load_config()
    assert (err.value.code, err.value.message) == (
        "E-IO-001", "cannot locate ~/.murmur/config.yaml: HOME is not set and this user has no home directory")
