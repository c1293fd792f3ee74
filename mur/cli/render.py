"""Output helpers shared by commands: stdout for results, stderr for progress and notes."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit_json(obj: Any) -> None:
    """Print exactly one compact JSON line on stdout."""
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), sort_keys=False) + "\n")
    sys.stdout.flush()


def note(text: str) -> None:
    """A human line on stderr (progress, notes)."""
    print(text, file=sys.stderr, flush=True)


def stderr_console():
    """A rich Console on stderr (imported lazily)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)
