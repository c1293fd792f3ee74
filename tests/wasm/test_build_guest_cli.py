"""`mur build DIR` on Python guests: compile first (componentize-py), syntax errors in milliseconds,
the install hint without componentize-py, and a capsule dir builds its local-source tools too."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pytest

from mur.errors import MurError
from mur.wasm.build import build_guests

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _tool(root: Path, source: str) -> Path:
    root.mkdir(parents=True)
    (root / "murmur.yaml").write_text('name: t\nversion: "0.1.0"\nruntime: tool\nrequires_files: [t.wasm]\n')
    (root / "app.py").write_text(source)
    return root


def test_a_syntax_error_is_reported_before_componentize_runs(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    _tool(tmp_path / "t", "def run(:\n    pass\n")
    started = time.monotonic()
    code, out, err = cli("build", "t")
    assert time.monotonic() - started < 10  # componentize-py alone takes ~a minute
    assert (code, out) == (1, "")
    assert err == (f"error[E-BLD-010]: {tmp_path}/t/app.py:1:9: SyntaxError: invalid syntax\n"
                   "  hint: fix the Python source; nothing was built\n")
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["app.py", "murmur.yaml"]


def test_without_componentize_py_the_hint_names_the_extra(tmp_path, monkeypatch, cli):
    """The lookup is real: no componentize-py beside the interpreter, none on PATH."""
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    guest = _tool(tmp_path / "t", "x = 1\n")
    with pytest.raises(MurError) as err:
        build_guests(guest)
    assert err.value.code == "E-BLD-010" and "pip install 'mur[guest]'" in err.value.hint
    (guest / "t.wasm").write_bytes(b"\0asm\1\0\0\0")  # shipped prebuilt: packed as it is, with a note
    notes = []
    assert build_guests(guest, progress=notes.append) == [(guest / "t.wasm", False)]
    assert "componentize-py is not installed" in notes[0]


@pytest.mark.skipif(shutil.which("componentize-py", path=str(Path(sys.executable).parent)) is None,
                    reason="needs componentize-py (pip install 'mur[guest]')")
def test_a_capsule_dir_builds_its_component_and_its_tools(tmp_path, monkeypatch, cli):
    """examples/hello without its .wasm files: `mur build` makes both (from the cache when CI's
    scripts/build-examples ran first, else componentize-py for real)."""
    project = tmp_path / "hello"
    shutil.copytree(EXAMPLES / "hello", project, ignore=shutil.ignore_patterns("*.wasm", "workdir", ".murmur"))
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("build", "hello")
    assert code == 0, err
    assert out == "Built capsule hello: 2 components (run it with: mur run -m hello)\n"
    assert (project / "capsule.wasm").stat().st_size > 1000 and (project / "greet" / "greet.wasm").is_file()
    code, out, err = cli("build", "hello/greet")  # an artifact: compiled (cached) and packed
    assert (code, out) == (0, "Built artifact: hello/greet/greet-0.1.0.mur.zip\n")
