"""How a value reads to a person: `yes`/`no`, `—` for nothing, lists joined, a path as typed. Never
Python's repr.

A leaf: the CLI's renderers and the library's text views (mur trace show, mur probe) share it, so
`True`, `None` and `['a', 'b']` never reach a terminal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

NOTHING = "—"


def plain(value: Any) -> str:
    """`value` as text for a person."""
    if value is None:
        return NOTHING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(plain(v) for v in value) or NOTHING
    if isinstance(value, dict):
        return "  ".join(f"{k} {plain(v)}" for k, v in value.items()) or NOTHING
    return str(value)


def shown_path(path: Path) -> str:
    """`path` as the user would type it here: relative to the working directory when below it
    (how they named it), "." for the working directory itself, else as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve())) or "."
    except (OSError, ValueError):
        return str(path)
