"""Reading trace.jsonl back: the one reader (`mur trace`, `mur eval`, tests).

A line that is not a JSON object with an `event_type` is E-TRC-001 (upstream's code), naming the
line; event types this version does not know are returned as they are, never refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mur.errors import MurError


def load_events(path: Path) -> list[dict[str, Any]]:
    """Parse trace.jsonl; E-TRC-001 on a line that is not a JSON object, E-IO-* when unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"trace not found: {path}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"cannot read {path}: {exc.strerror or exc}") from exc
    events = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise MurError("E-TRC-001", f"{path}: line {number} is not valid JSON: {exc.msg}") from exc
        if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
            raise MurError("E-TRC-001", f"{path}: line {number} is not a trace event (no event_type)")
        events.append(event)
    return events
