"""Golden cases for `mur build DIR`: cases/<name>/src is the artifact source directory.

Beside it: `expected.err` (exact stderr of a failing build, exit 1) or `expected.json`
({"stdout", "stderr", "entries"}: a successful build and the archive's entry names in order).
`setup.json` may add what git cannot hold portably: {"symlinks": {link: target}, "files": {name:
text}, "args": [...]}. The build runs as `mur build src` from the case's temp dir (so messages that
echo the source show `src`); placeholders: {REAL} the source's realpath, {TMP} the temp dir.
MUR_REGEN_GOLDEN=1 rewrites the expectations (review the diff by hand).
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "cases"
CASE_NAMES = sorted(p.name for p in CASES.iterdir() if (p / "src").is_dir())


def _prepare(name: str, tmp: Path) -> tuple[Path, list[str]]:
    case = CASES / name
    src = tmp / "src"
    shutil.copytree(case / "src", src, symlinks=True)
    setup = json.loads((case / "setup.json").read_text()) if (case / "setup.json").exists() else {}
    for link, target in setup.get("symlinks", {}).items():
        os.symlink(target, src / link)
    for rel, text in setup.get("files", {}).items():
        (src / rel).write_text(text)
    args = [a.replace("{TMP}", str(tmp)) for a in setup.get("args", [])]
    return src, args


def _subst(text: str, src: Path, tmp: Path) -> str:
    return text.replace("{REAL}", os.path.realpath(src)).replace("{TMP}", str(tmp))


def _unsubst(text: str, src: Path, tmp: Path) -> str:
    return text.replace(os.path.realpath(src), "{REAL}").replace(str(tmp), "{TMP}")


def _entries(stdout: str, tmp: Path) -> list[str]:
    path = stdout.strip().removeprefix("Built artifact: ")
    with zipfile.ZipFile(tmp / path) as zf:
        return zf.namelist()


@pytest.mark.parametrize("name", CASE_NAMES)
def test_build_case(name, isolated, mur):
    tmp = isolated / "case"
    tmp.mkdir()
    src, args = _prepare(name, tmp)
    result = mur("build", "src", *args, cwd=tmp)
    case = CASES / name

    if os.environ.get("MUR_REGEN_GOLDEN") == "1":
        for old in ("expected.err", "expected.json"):
            (case / old).unlink(missing_ok=True)
        if result.code == 0:
            doc = {
                "stdout": _unsubst(result.out, src, tmp),
                "stderr": _unsubst(result.err, src, tmp),
                "entries": _entries(result.out, tmp),
            }
            (case / "expected.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
        else:
            assert result.code == 1 and result.out == ""
            (case / "expected.err").write_text(_unsubst(result.err, src, tmp))
        return

    if (case / "expected.err").exists():
        assert result.code == 1, result.out
        assert result.out == ""
        assert result.err == _subst((case / "expected.err").read_text(), src, tmp)
        assert not list(tmp.rglob("*.mur.zip")), "a failed build wrote an artifact"
        assert not [p for p in tmp.rglob("*.tmp")], "a failed build left a temp file"
    else:
        expected = json.loads((case / "expected.json").read_text())
        assert result.code == 0, result.err
        assert result.out == _subst(expected["stdout"], src, tmp)
        assert result.err == _subst(expected["stderr"], src, tmp)
        assert _entries(result.out, tmp) == expected["entries"]
