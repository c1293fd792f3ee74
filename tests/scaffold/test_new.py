"""`mur new tool|capsule|agent NAME`: the files it writes and the refusals. That each scaffold builds
and runs offline (real componentize-py builds, the loopback model server for the agent) is
integration/cli/test_new_projects.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mur.scaffold.new import MODEL_SERVER_MODULE



@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


@pytest.mark.parametrize("kind, files", [
    ("capsule", ["app.py", "murmur.yaml"]),
    ("tool", ["app.py", "demo/app.py", "demo/murmur.yaml", "murmur.yaml"]),
    ("agent", ["driver/anthropic_wire.py", "driver/app.py", "driver/murmur.yaml", "murmur.yaml", "replies.yaml"]),
])
def test_new_writes_the_template_with_the_name(here, cli, kind, files):
    code, out, err = cli("new", kind, "my-thing", "--json")
    assert (code, err) == (0, "")
    result = json.loads(out)
    root = here / "my-thing"
    assert sorted(str(Path(f).relative_to(root)) for f in result["files"]) == files
    for path in root.rglob("*"):
        assert not path.is_symlink()
        if path.is_file():
            assert "__NAME__" not in path.read_text() and "__MODEL_SERVER__" not in path.read_text()
    manifest = (root / "murmur.yaml").read_text()
    assert "name: my-thing\n" in manifest
    if kind == "agent":
        assert f"python -m {MODEL_SERVER_MODULE} --script my-thing/replies.yaml" in result["next"][1]
        assert (root / "driver" / "app.py").read_bytes() == (
            Path(__file__).resolve().parents[2] / "examples/murmur-driver-anthropic/app.py").read_bytes()
    # What the scaffold writes is valid: the capsule manifest loads, the artifact one parses.
    code, _, err = cli("run", "-m", str(root / ("demo" if kind == "tool" else "")), "--explain-scope")
    assert code == 0, err


def test_the_next_steps_run_as_printed_with_or_without_the_venv_on_path(here, cli, monkeypatch):
    """Debian has no `python`, and a mur run as .venv/bin/mur with its venv not active is on no PATH:
    then the steps name this interpreter and the mur beside it; with the venv active, plain words."""
    import shlex
    import sys

    bindir = Path(sys.executable).parent
    monkeypatch.setenv("PATH", str(here))  # neither `python` nor `mur`
    code, out, _ = cli("new", "agent", "bare", "--json")
    steps = json.loads(out)["next"]
    if (bindir / "mur").is_file():
        assert steps[0] == f"{shlex.quote(str(bindir / 'mur'))} build bare"
    assert steps[1].startswith(f"{shlex.quote(sys.executable)} -m {MODEL_SERVER_MODULE} ")
    if Path(sys.executable).name == "python" and (bindir / "mur").is_file():  # a venv, as the README makes
        monkeypatch.setenv("PATH", str(bindir))
        code, out, _ = cli("new", "agent", "active", "--json")
        steps = json.loads(out)["next"]
        assert steps[0] == "mur build active" and steps[1].startswith(f"python -m {MODEL_SERVER_MODULE} ")


def test_new_refusals_write_nothing(here, cli):
    code, _, err = cli("new", "capsule", "My_Thing")
    assert code == 1 and err.startswith("error[E-BLD-001]: invalid artifact name 'My_Thing'")
    (here / "taken").mkdir()
    (here / "taken" / "keep.txt").write_text("x")
    code, _, err = cli("new", "tool", "taken")
    assert code == 1 and err.startswith(f"error[E-IO-003]: {here / 'taken'} already exists")
    assert sorted(p.name for p in (here / "taken").iterdir()) == ["keep.txt"]
    code, _, err = cli("new", "service", "x")
    assert code == 2
    assert sorted(p.name for p in here.iterdir()) == ["taken"]
