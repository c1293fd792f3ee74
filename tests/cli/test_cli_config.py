"""`mur config set` / `mur config show`: the six keys upstream accepts, atomic writes, the api_key rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    r = mur("config", "set", "containment", "sealed", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error[E-CFG-002]: unsupported config key 'containment'")
    assert "inference.endpoint" in r.stderr  # the hint lists the keys
    assert not (tmp_path / ".murmur" / "config.yaml").exists()


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
