"""`mur --help` from the command table, without importing typer (its import alone is ~2x a bare
interpreter's start-up).

The layout is click's, as typer prints it with rich_markup_mode=None: the same width rule
(terminal columns capped at 80, less 2, at least 50), the same two-column definition lists and the
same short-help truncation; tests/cli/test_cli_lazy.py compares this with typer's own rendering of
the fully imported app at several widths.
"""

from __future__ import annotations

import shutil
import textwrap

from mur.cli.commands import APP_HELP, COMMANDS, OPTIONS

USAGE = "Usage: mur [OPTIONS] COMMAND [ARGS]..."
COL_MAX, COL_SPACING, INDENT = 30, 2, 2


def width() -> int:
    return max(min(shutil.get_terminal_size().columns, 80) - 2, 50)


def short_help(text: str, limit: int) -> str:
    """The first sentence or so of `text` in at most `limit` characters (click's rule)."""
    words = text.partition("\n\n")[0].split()
    if not words:
        return ""
    total, last = 0, len(words) - 1
    for i, word in enumerate(words):
        total += len(word) + (i > 0)
        if total > limit:
            break
        if word[-1] == ".":
            return " ".join(words[: i + 1])
        if total == limit and i != last:
            break
    else:
        return " ".join(words)
    total += 3
    while i > 0:
        total -= len(words[i]) + (i > 0)
        if total <= limit:
            break
        i -= 1
    return " ".join(words[:i]) + "..."


def _wrap(text: str, size: int, indent: str = "") -> list[str]:
    return textwrap.TextWrapper(size, initial_indent=indent, subsequent_indent=indent,
                                replace_whitespace=False).wrap(text.expandtabs())


def definitions(rows: list[tuple[str, str]], total: int) -> list[str]:
    """A two-column list indented by INDENT: names, then their text wrapped beside them."""
    first_col = min(max(len(name) for name, _ in rows), COL_MAX) + COL_SPACING
    pad = " " * (first_col + INDENT)
    out = []
    for name, text in rows:
        lead = " " * INDENT + name
        if not text:
            out.append(lead)
            continue
        lines = _wrap(text, max(total - first_col - 2, 10))
        if len(name) <= first_col - COL_SPACING:
            head = lead + " " * (first_col - len(name))
        else:
            out.append(lead)
            head = pad
        out.append(head + (lines[0] if lines else ""))
        out += [pad + line for line in lines[1:]]
    return out


def render(total: int | None = None) -> str:
    total = width() if total is None else total
    limit = total - 6 - max(len(name) for name, _, _ in COMMANDS)
    lines = [USAGE, "", *_wrap(APP_HELP, total, " " * INDENT), "", "Options:",
             *definitions(list(OPTIONS), total), "", "Commands:",
             *definitions([(name, short_help(text, limit)) for name, _, text in COMMANDS], total)]
    return "\n".join(lines) + "\n"
