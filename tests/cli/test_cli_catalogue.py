"""One documented catalogue: every code the code base uses is in CATALOGUE, and docs/errors.md lists
exactly the codes in CATALOGUE (regenerate with `python -m mur.errors > docs/errors.md`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from mur.errors import CATALOGUE, FALLBACK_HINTS, MurError, catalogue_markdown, collect_warnings, warn

ROOT = Path(__file__).resolve().parents[2]
CODE = r"(?:[EW]-[A-Z0-9]+-\d{3}|E-INTERNAL)"


def test_every_code_used_in_the_code_base_is_catalogued():
    used: dict[str, set[str]] = {}
    for path in (ROOT / "mur").rglob("*.py"):
        if path == ROOT / "mur" / "errors.py":
            continue
        text = path.read_text()
        # a code as a whole string literal (MurError("E-..."), warn("W-..."), ("W-...", msg)) or rendered
        for match in re.finditer(rf"""["']({CODE})["']|\[({CODE})\]""", text):
            used.setdefault(match.group(1) or match.group(2), set()).add(str(path.relative_to(ROOT)))
    missing = {code: sorted(files) for code, files in used.items() if code not in CATALOGUE}
    assert not missing, f"codes used but not in mur/errors.py CATALOGUE: {missing}"
    assert len(used) > 40  # the scan really finds the codes


def test_catalogue_entries_are_well_formed():
    for code, meaning in CATALOGUE.items():
        assert re.fullmatch(CODE, code), code
        assert meaning and meaning == meaning.strip() and "\n" not in meaning, code
    assert set(FALLBACK_HINTS) <= {c for c in CATALOGUE if c.startswith("E-")}
    assert all(h and h == h.strip() and "\n" not in h for h in FALLBACK_HINTS.values())


def test_docs_errors_md_lists_exactly_the_catalogue():
    text = (ROOT / "docs" / "errors.md").read_text()
    documented = re.findall(rf"^\| `({CODE})` \|", text, flags=re.M)
    assert sorted(documented) == sorted(CATALOGUE)
    assert len(documented) == len(set(documented)), "a code is documented twice"
    assert text == catalogue_markdown(), "docs/errors.md is stale: python -m mur.errors > docs/errors.md"


def test_render_format():
    assert MurError("E-MAN-001", "murmur.yaml: missing required field 'name'").render() == (
        f"error[E-MAN-001]: murmur.yaml: missing required field 'name'\n  hint: {FALLBACK_HINTS['E-MAN-001']}")
    assert MurError("E-IO-003", "a failure of many kinds").render() == "error[E-IO-003]: a failure of many kinds"
    assert MurError("E-IO-001", "not found", "do this").render() == "error[E-IO-001]: not found\n  hint: do this"
    with collect_warnings() as seen:
        warn("W-SEC-007", "dropped")
    assert seen == [("W-SEC-007", "dropped")]


def failed(operation) -> OSError:
    try:
        operation()
    except OSError as exc:
        return exc
    raise AssertionError("the operation did not fail")


def test_a_failed_file_operation_says_what_to_do_about_its_reason(tmp_path):
    """E-IO-003 covers unlike failures, so it has no general hint: a raise site that names the file
    and the system's reason gets the hint of that reason from the OSError it was raised from, made
    by the real failing call; the site's own hint still wins, and a reason with no fix says nothing."""
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "file", tmp_path / "link")
    cases = {
        "does not exist: check the path": lambda: open(tmp_path / "missing"),
        "is a directory: give a file": lambda: open(tmp_path, "w"),
        "is a file, not a directory": lambda: open(tmp_path / "file" / "inner"),
        "symbolic link, which is not followed here": lambda: os.open(tmp_path / "link", os.O_RDONLY | os.O_NOFOLLOW),
        "already exists: remove it or choose another name": lambda: os.mkdir(tmp_path / "file"),
    }
    for words, operation in cases.items():
        exc = failed(operation)
        try:
            raise MurError("E-IO-003", f"cannot use {exc.filename}: {exc.strerror}") from exc
        except MurError as err:
            hint = err.render().split("\n  hint: ")[1]
            assert words in hint and str(tmp_path) not in hint, (words, hint)  # the message names the file
            err.message = "cannot do that"
            assert str(tmp_path) in err.render().split("\n  hint: ")[1]
            err.hint = "the site's own"
            assert err.render().endswith("\n  hint: the site's own")
    try:
        raise MurError("E-IO-003", "cannot read") from failed(lambda: os.read(-1, 1))  # EBADF: nothing to advise
    except MurError as err:
        assert err.render() == "error[E-IO-003]: cannot read"


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EROFS", "EACCES", "EMFILE"])
def test_reasons_a_test_cannot_cause_here_have_hints_too(errno_name):
    import errno

    code = getattr(errno, errno_name)
    err = MurError("E-IO-003", "cannot write /data/x")
    err.__cause__ = OSError(code, os.strerror(code), "/data/x")
    assert "\n  hint: " in err.render()
