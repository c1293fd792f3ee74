"""`mur config set|get|unset|show`: every documented key, values checked before anything is written,
atomic writes, the api_key rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def mur(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mur", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "HOME": str(cwd / "home")}, timeout=60)


def test_set_writes_the_project_file_and_keeps_other_keys(tmp_path):
    cfg = tmp_path / ".murmur" / "config.yaml"
    cfg.parent.mkdir()
    cfg.write_text("containment: scoped\ninference:\n  provider: anthropic\n")
    r = mur("config", "set", "inference.model", "claude-x", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(cfg.read_text()) == {"containment": "scoped",
                                               "inference": {"provider": "anthropic", "model": "claude-x"}}
    shown = json.loads(mur("config", "show", "--json", cwd=tmp_path).stdout)
    assert shown["inference"] == {"provider": "anthropic", "model": "claude-x"} and shown["containment"] == "scoped"


def test_unsupported_key_is_cfg_002_and_writes_nothing(tmp_path):
    r = mur("config", "set", "registry.sources", "x", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error[E-CFG-002]: unsupported config key 'registry.sources'")
    assert "deploy.release_source" in r.stderr  # the hint lists the keys
    assert not (tmp_path / ".murmur" / "config.yaml").exists()


def test_every_documented_key_round_trips_through_set_get_unset(tmp_path):
    """containment and deploy.release_source (refused before) included; paths are stored absolute."""
    (tmp_path / "releases").mkdir()
    values = {"registry.index_url": "https://example.org/artifacts-index.json",
              "registry.remote_url": "http://127.0.0.1:7800", "registry.default": "official",
              "inference.provider": "openai", "inference.model": "m-1", "inference.endpoint": "https://api.example.org",
              "containment": "scoped", "deploy.release_source": str(tmp_path / "releases")}
    for key, value in values.items():
        r = mur("config", "set", key, value, cwd=tmp_path)
        assert r.returncode == 0, (key, r.stderr)
        got = json.loads(mur("config", "get", key, "--json", cwd=tmp_path).stdout)
        assert got == {"key": key, "value": value, "file": str(tmp_path / ".murmur" / "config.yaml")}
    r = mur("config", "set", "deploy.release_source", "releases", cwd=tmp_path)  # relative: made absolute
    assert yaml.safe_load((tmp_path / ".murmur/config.yaml").read_text())["deploy"]["release_source"] == str(
        tmp_path / "releases")
    r = mur("config", "get", "inference.model", cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "m-1\n") and str(tmp_path) in r.stderr
    for key in values:
        r = mur("config", "unset", key, cwd=tmp_path)
        assert r.returncode == 0 and r.stderr.startswith(f"unset {key} in "), r.stderr
    assert yaml.safe_load((tmp_path / ".murmur/config.yaml").read_text()) == {}
    r = mur("config", "unset", "containment", cwd=tmp_path)
    assert r.returncode == 0 and "containment was not set in" in r.stderr
    r = mur("config", "get", "inference.model", "--json", cwd=tmp_path)
    assert json.loads(r.stdout) == {"key": "inference.model", "value": None, "file": None}
    # The built-in default (no global file): registry.default is `official`, from no file.
    r = mur("config", "get", "registry.default", cwd=tmp_path)
    assert r.stdout == "official\n" and "built-in default" in r.stderr


@pytest.mark.parametrize("key, value, message", [
    ("registry.default", "bogus", "invalid value 'bogus' for registry.default: no registry source has that name "
                                  "(configured: official)"),
    ("containment", "strict", "invalid value 'strict' for containment: must be one of: advisory, scoped, sealed"),
    ("inference.endpoint", "api.example.org", "invalid value 'api.example.org' for inference.endpoint: must be an "
                                              "http:// or https:// URL with a host"),
    ("deploy.release_source", "http://example.org/r", "invalid value 'http://example.org/r' for "
                                                      "deploy.release_source: plain http:// is accepted for a loopback "
                                                      "host only; use https://"),
    ("inference.model", " ", "invalid value ' ' for inference.model: must not be empty"),
])
def test_bad_values_are_cfg_003_and_write_nothing(tmp_path, key, value, message):
    r = mur("config", "set", key, value, cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith(f"error[E-CFG-003]: {message}"), r.stderr
    assert "  hint: " in r.stderr and not (tmp_path / ".murmur" / "config.yaml").exists()


def test_registry_default_must_name_a_source_of_the_merged_view(tmp_path):
    gfile = tmp_path / "home" / ".murmur" / "config.yaml"
    gfile.parent.mkdir(parents=True)
    gfile.write_text("registry:\n  sources:\n    - {name: team, type: github, repo: o/r}\n")
    assert mur("config", "set", "registry.default", "official", cwd=tmp_path).returncode == 1  # no built-in now
    assert mur("config", "set", "registry.default", "team", cwd=tmp_path).returncode == 0


def test_api_key_goes_only_to_the_global_file_mode_0600(tmp_path):
    r = mur("config", "set", "inference.api_key", "sk-secret", cwd=tmp_path)
    assert r.returncode == 1 and "error[E-CFG-002]" in r.stderr and not (tmp_path / ".murmur").exists()
    r = mur("config", "set", "-g", "inference.api_key", "sk-secret", cwd=tmp_path)
    assert r.returncode == 0 and "sk-secret" not in r.stderr + r.stdout
    gfile = tmp_path / "home" / ".murmur" / "config.yaml"
    assert gfile.stat().st_mode & 0o777 == 0o600
    assert yaml.safe_load(gfile.read_text()) == {"inference": {"api_key": "sk-secret"}}
    assert "sk-secret" not in mur("config", "show", "--json", cwd=tmp_path).stdout


def test_broken_file_is_refused_and_left_alone(tmp_path):
    cfg = tmp_path / ".murmur" / "config.yaml"
    cfg.parent.mkdir()
    cfg.write_text(": [\n")
    r = mur("config", "set", "inference.model", "m", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error[E-CFG-003]") and cfg.read_text() == ": [\n"
    r = mur("config", "set", "inference.provider", "acme", cwd=tmp_path)
    assert r.returncode == 1 and "error[E-CFG-003]" in r.stderr
