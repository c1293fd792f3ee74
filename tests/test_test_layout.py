"""The suite's own layout: pytest collects tests/ and integration/ in one run without packages, so two
test modules with one basename stop the whole run at collection ("import file mismatch")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_test_module_names_are_unique_across_tests_and_integration():
    seen: dict[str, list[str]] = defaultdict(list)
    for folder in ("tests", "integration"):
        for path in (ROOT / folder).rglob("test_*.py"):
            seen[path.name].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
