"""Unknown keys in a capsule manifest (W-MAN-001): found, named, and given a "did you mean".

Policy: a key no model field claims is kept, ignored and reported once on stderr, never refused — a
manifest written for a newer mur must still load here (upstream's later W-SEC-019 makes the same
choice, with the same wording). A near miss of a known key of the same block (restricted
Damerau-Levenshtein distance at most a third of the longer key, and at least 1) is named as a likely
spelling problem; anything else as a key this build does not know. Free-form blocks
(`inference.driver.config`) are the driver's vocabulary and are never checked.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel

from mur.manifest.capsule import Capsule


def _edit_distance(left: str, right: str) -> int:
    """Optimal-string-alignment distance: a transposition of two neighbours costs 1."""
    rows = [[0] * (len(right) + 1) for _ in range(len(left) + 1)]
    for i in range(len(left) + 1):
        rows[i][0] = i
    for j in range(len(right) + 1):
        rows[0][j] = j
    for i in range(1, len(left) + 1):
        for j in range(1, len(right) + 1):
            best = min(
                rows[i - 1][j - 1] + (left[i - 1] != right[j - 1]),
                rows[i - 1][j] + 1,
                rows[i][j - 1] + 1,
            )
            if i > 1 and j > 1 and left[i - 1] == right[j - 2] and left[i - 2] == right[j - 1]:
                best = min(best, rows[i - 2][j - 2] + 1)
            rows[i][j] = best
    return rows[len(left)][len(right)]


def nearest_known_key(declared: str, known: list[str]) -> str | None:
    """The known key closest to `declared`, when one is close enough to call `declared` a typo."""
    best: tuple[int, str] | None = None
    for candidate in known:
        distance = _edit_distance(declared, candidate)
        if distance <= max(1, max(len(declared), len(candidate)) // 3) and (best is None or distance < best[0]):
            best = (distance, candidate)
    return best[1] if best else None


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(model class, is a list of it) behind a field annotation such as Optional[list[X]]."""
    origin = typing.get_origin(annotation)
    if origin is list:
        inner, _ = _model_of(typing.get_args(annotation)[0])
        return inner, True
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found[0] is not None:
                return found
        return None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _unknown_keys(model: type[BaseModel], raw: dict, block: str) -> list[tuple[str, str, str | None]]:
    """(key, containing block, nearest known key) for every key no field claims, in document order.

    Walks the normalized YAML against the model classes (not a validated model), so the warnings
    print even when the manifest then fails to validate — `nmae:` is named before "missing 'name'"."""
    found: list[tuple[str, str, str | None]] = []
    fields = model.model_fields
    known = list(fields)
    for key, value in raw.items():
        path = f"{block}.{key}" if block else str(key)
        if key not in fields:
            found.append((str(key), block, nearest_known_key(str(key), known)))
            continue
        if path in ("inference.driver.config", "inference.provider.config"):
            continue  # free-form: the driver's own vocabulary
        child, is_list = _model_of(fields[key].annotation)
        if child is None:
            continue
        if not is_list and isinstance(value, dict):
            found.extend(_unknown_keys(child, value, path))
        elif is_list and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    found.extend(_unknown_keys(child, item, f"{path}[{index}]"))
    return found


def unknown_key_messages(raw: dict) -> list[str]:
    """One W-MAN-001 message per key of a (normalized) capsule manifest that no field claims."""
    out = []
    for key, block, nearest in _unknown_keys(Capsule, raw, ""):
        where = f"in {block}" if block else "at the top level"
        if nearest:
            out.append(
                f"unrecognized key '{key}' {where} — did you mean '{nearest}'? The key was parsed and "
                "ignored, so whatever it declared is not in effect"
            )
        else:
            out.append(
                f"unrecognized key '{key}' {where} — this build of mur does not know it (it may come "
                "from a newer mur); it was parsed and ignored"
            )
    return out
