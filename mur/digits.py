"""Decimal numbers in text mur reads (manifests, options, HTTP heads, remote output, /proc): ASCII only.

`str.isdigit()` is true for '¹' and '①', which `int()` refuses (a traceback where an error was
due), and for '٣' or '३', which `int()` reads as 3 (a port or a length nobody wrote in ASCII). Every
"is this a number" check on text goes through here, so both mean: not a number. A leaf module.
"""

from __future__ import annotations


def is_digits(text: str) -> bool:
    """One or more ASCII digits, nothing else."""
    return text.isascii() and text.isdigit()


def digits_int(text: str) -> int | None:
    """The number `text` spells in ASCII digits, else None."""
    return int(text) if is_digits(text) else None
