"""How the `mur trace` views write numbers: upstream's formats, which scripts read (one owner).

Durations are `70ms` under a second, else seconds with one decimal (`1.7s`, `125.0s`); counts carry
thousands separators (`2,200`); an average that does not exist (no turns, no calls) is `—`. Trace
fields are never trusted: a missing or non-numeric one reads as 0.
"""

from __future__ import annotations

import json
from typing import Any

RULE_WIDTH = 49
NOTHING = "—"


def as_int(value: Any) -> int:
    """`value` as an int, 0 when it is missing or not a number (trace fields are never trusted)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # json.loads reads Infinity/NaN
        return 0


def fmt_ms(ms: Any) -> str:
    """A millisecond count as upstream writes it: `70ms`, `1.0s`, `1.7s`, `125.0s`."""
    ms = as_int(ms)
    return f"{ms}ms" if ms < 1000 else f"{ms / 1000:.1f}s"


def fmt_avg(value: float | None) -> str:
    """An average rounded to a whole number, `—` when there is none."""
    return NOTHING if value is None else f"{value:.0f}"


def mean(values: list[int] | list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def fmt_exit_codes(codes: dict[int, int]) -> str:
    """`4 ok, 1 failed (exit 1), 2 failed (exit 127)`: successes first, then failures by exit code."""
    parts = [f"{codes[0]} ok"] if codes.get(0) else []
    parts += [f"{n} failed (exit {code})" for code, n in sorted(codes.items()) if code != 0]
    return ", ".join(parts)


def fmt_session_short(session_id: str) -> str:
    """`ses_` and 8 characters, then `...` (upstream's report blocks)."""
    keep = len("ses_") + 8
    return session_id[:keep] + "..." if len(session_id) > keep else session_id


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def heading(title: str) -> str:
    """`── Title ─────…`, the section rule every `mur trace` view uses."""
    head = f"── {title} "
    return head + "─" * max(RULE_WIDTH - len(head), 3)


def field(label: str, value: Any) -> str:
    """`label:      value`, upstream's 12-column labels (a longer label keeps one space)."""
    return f"{label + ':':<11} {value}"


def fmt_input(value: Any, limit: int = 120) -> str:
    """`  <compact JSON>` (keys sorted, as upstream prints them) cut to `limit` characters with `…`, or ""
    for no value."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=str)
    return "  " + (text if len(text) <= limit else text[:limit] + "…")


def cut(text: str, limit: int) -> str:
    """`text` cut to `limit` characters with `…` after them."""
    return text if len(text) <= limit else text[:limit] + "…"


def one_line(value: Any) -> str:
    """A value a tool or hook chose, on one line: a newline in it cannot fake a line of the view."""
    return str(value).replace("\r", "\\r").replace("\n", "\\n")


def text(value: Any) -> str | None:
    """A trace field as a string (None stays None): a malformed field never breaks rendering."""
    if value is None or isinstance(value, str):
        return value
    return str(value)
