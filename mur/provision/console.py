"""A VM's serial console as plain text, and what cloud-init prints there.

The serial log is what the guest wrote to a terminal: systemd's colours, the kernel's and getty's
terminal resets (ESC c), clear-screen and cursor moves, carriage returns. Shown to the operator
as is (a progress line, an error's tail), those would reset or clear the operator's own terminal,
so everything here leaves as text: escape sequences removed, a line overwritten by a carriage
return kept as the terminal would show it, other control characters dropped.
"""

from __future__ import annotations

import re

# ECMA-48: CSI (ESC [ ... final), OSC/DCS/PM/APC strings (ESC ] ... BEL or ESC \), other ESC sequences
# (ESC c, ESC ( B, ESC 7 ...), and their 8-bit forms.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[\]P^_X][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[ -/]*[0-~]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x9d\x90\x9e\x9f\x98][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def plain(raw: str) -> str:
    """`raw` console output as text a terminal shows and cannot act on (newlines and tabs kept)."""
    text = _ESCAPES.sub("", raw.replace("\r\n", "\n"))
    lines = []
    for line in text.split("\n"):
        if "\r" in line:  # a carriage return: what comes after it overwrote what came before
            line = next((part for part in reversed(line.split("\r")) if part), "")
        lines.append(_CONTROLS.sub("", line))
    return "\n".join(lines)


def tail(raw: str, lines: int = 0, chars: int = 0) -> str:
    """The last `lines` non-empty lines (or last `chars` characters) of the console, as plain text."""
    text = plain(raw)
    if lines:
        kept = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
        return "\n".join(kept[-lines:])
    return text[-chars:] if chars else text
