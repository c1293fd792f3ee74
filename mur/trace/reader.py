"""Reading trace.jsonl back: the one reader (`mur trace`, `mur eval`, tests).

A line that is not a JSON object with an `event_type` is E-TRC-001 (upstream's code), naming the
line; event types this version does not know are returned as they are, never refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.jsonl import BadLine, parse_records, read_records


def load_events(path: Path) -> list[dict[str, Any]]:
    """Parse trace.jsonl; E-TRC-001 on a line that is not a JSON object, E-IO-* when unreadable."""
    try:
        records = read_records(path)
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"trace file not found: {path}") from exc
    except BadLine as exc:  # upstream's `<path>:<line>: <why>`
        raise MurError("E-TRC-001", f"{path}:{exc.number}: line {exc.number} is {exc.why}") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read {path}: {exc.strerror or exc}") from exc
    return _events(records, path)


def parse_events(data: bytes, source: str) -> list[dict[str, Any]]:
    """`load_events` for a trace read elsewhere (a deployment's, over SFTP); `source` names it."""
    try:
        records = parse_records(data, source)
    except BadLine as exc:
        raise MurError("E-TRC-001", f"{source}: line {exc.number} is {exc.why}") from exc
    return _events(records, source)


def _events(records: list[tuple[int, Any]], path: Path | str) -> list[dict[str, Any]]:
    events = []
    for number, event in records:
        if not isinstance(event, dict) or not isinstance(event.get("event_type"), str):
            raise MurError("E-TRC-001", f"{path}:{number}: line {number} is not a trace event (no event_type)")
        events.append(event)
    return events
