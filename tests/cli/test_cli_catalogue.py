"""One documented catalogue: every code the code base uses is in CATALOGUE, and docs/errors.md lists
exactly the codes in CATALOGUE (regenerate with `python -m mur.errors > docs/errors.md`)."""

from __future__ import annotations

import re
from pathlib import Path

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
