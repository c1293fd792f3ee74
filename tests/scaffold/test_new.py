"""`mur new tool|capsule|agent NAME`: the files it writes, the refusals, and (when componentize-py is
installed) that each scaffold builds and that the capsule and tool ones run to a result, offline.
The agent one runs against the loopback model server in integration/cli/test_new_agent.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from mur.cli.main import main
from mur.scaffold.new import MODEL_SERVER_MODULE

HAS_COMPONENTIZE = shutil.which("componentize-py", path=str(Path(sys.executable).parent)) is not None


def _mur(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


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
def test_new_writes_the_template_with_the_name(here, capsys, kind, files):
    code, out, err = _mur(capsys, "new", kind, "my-thing", "--json")
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
    code, _, err = _mur(capsys, "run", "-m", str(root / ("demo" if kind == "tool" else "")), "--explain-scope")
    assert code == 0, err


def test_new_refusals_write_nothing(here, capsys):
    code, _, err = _mur(capsys, "new", "capsule", "My_Thing")
    assert code == 1 and err.startswith("error[E-BLD-001]: invalid artifact name 'My_Thing'")
    (here / "taken").mkdir()
    (here / "taken" / "keep.txt").write_text("x")
    code, _, err = _mur(capsys, "new", "tool", "taken")
    assert code == 1 and err.startswith(f"error[E-IO-003]: {here / 'taken'} already exists")
    assert sorted(p.name for p in (here / "taken").iterdir()) == ["keep.txt"]
    code, _, err = _mur(capsys, "new", "service", "x")
    assert code == 2
    assert sorted(p.name for p in here.iterdir()) == ["taken"]


@pytest.mark.skipif(not HAS_COMPONENTIZE, reason="needs componentize-py (pip install 'mur[guest]')")
@pytest.mark.slow
def test_the_capsule_and_tool_scaffolds_build_and_run(here, capsys):
    """Real componentize-py builds (about a minute each, cached by input hash afterwards)."""
    for kind, run_dir in (("capsule", "c"), ("tool", "t/demo")):
        name = run_dir.split("/")[0]
        assert _mur(capsys, "new", kind, name)[0] == 0
        for target in dict.fromkeys([name, run_dir]):
            code, _, err = _mur(capsys, "build", target)
            assert code == 0, err
        code, out, err = _mur(capsys, "run", "-m", run_dir, "-t", "Ada", "--json")
        assert code == 0, err
        result = next((here / run_dir / "workdir").glob("ses_*/out/result.txt")).read_text()
        assert result == ("c was asked: Ada\n" if kind == "capsule" else "ADA\n")
