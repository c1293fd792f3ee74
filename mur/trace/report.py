"""`mur trace report`: aggregate statistics over several sessions (upstream cli.md "mur trace report").

The set: the sessions named (any session address, each counted once, in the order given), else every
session in the workdir (oldest first), narrowed by `--since D` (sessions created within D of now, by
the Unix-ms timestamp a session id starts with, as upstream; D is `<n>s`, `<n>m`, `<n>h` or `<n>d`)
and then by `--last N` (the N most recent of those). Each session is summarized as `mur trace show`
does. A session whose trace does not parse or is incomplete (still running, killed) is skipped and
reported in `skipped` (the CLI prints a note on stderr) rather than failing the whole report; when
nothing is left, E-TRC-001 (nothing readable) or E-TRC-002 (no sessions, or none in the window).

The statistics (mean, population standard deviation, min, max) are upstream's rows; mur adds the
totals (`--json`), tool errors and skill calls, and the most used tools. Sessions that ran more than
one task also feed the per-task averages (each task's `task_end` totals). The text is in
mur.trace.report_view.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.trace import events as ev
from mur.trace.fmt import as_int

_DURATION = re.compile(r"\s*(\d+)\s*([smhd])\s*")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# (key, label, format): upstream's rows in its order, then mur's. Formats: "n" one decimal, "k" a whole
# number with separators (cut, as upstream).
METRICS = (
    ("turns", "turns", "n"),
    ("duration_ms", "duration (ms)", "k"),
    ("input_tokens", "input tokens", "k"),
    ("output_tokens", "output tokens", "k"),
    ("tool_calls", "tool calls", "n"),
    ("tool_success_pct", "tool success (%)", "n"),  # sessions with tool calls only; no row without any
    ("shell_calls", "shell calls", "n"),
    ("redundant_calls", "redundant calls", "n"),
    ("tool_errors", "tool errors", "n"),
    ("skill_calls", "skill calls", "n"),
)
TASK_METRICS = (
    ("turns", "task turns", "n"),
    ("input_tokens", "task input tokens", "k"),
    ("output_tokens", "task output tokens", "k"),
    ("duration_ms", "task duration (ms)", "k"),
)
_ID_CLOCK = 12  # a session id's first 12 hex digits are its creation time in Unix ms (UUIDv7)


def parse_duration(text: str) -> int:
    """`30m`, `2h`, `1d`, `45s` -> milliseconds; ValueError for anything else (or zero)."""
    match = _DURATION.fullmatch(text or "")
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"'{text}' is not a duration: write <n>s, <n>m, <n>h or <n>d (e.g. 30m, 2h, 1d)")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def created_ms(session_id: str) -> int | None:
    """When a session was created, from its id (`ses_` + UUIDv7 hex); None for an id that does not say."""
    digits = session_id[len("ses_"):len("ses_") + _ID_CLOCK]
    try:
        return int(digits, 16) if len(digits) == _ID_CLOCK else None
    except ValueError:
        return None


def session_row(events: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    """One session's numbers in the report (E-TRC-001 when its trace is incomplete)."""
    from mur.trace.summary import summarize

    s = summarize(events, str(path))
    start = next(e for e in events if e["event_type"] == ev.SESSION_START)
    tools, shells = s["tool_calls"], s["shell_calls"]
    return {
        "session_id": str(s["session_id"] or path.parent.name),
        "trace": str(path),
        "started_ms": as_int(start.get("timestamp")),
        "status": str(s["status"] or "unknown"),  # a session_end without exit_status is still counted
        "turns": s["turns"]["count"],
        "input_tokens": s["tokens"]["input"],
        "output_tokens": s["tokens"]["output"],
        "tool_calls": tools["count"],
        "tool_ok": tools["ok"],
        "tool_errors": tools["error"],
        "tool_success_pct": tools["success_pct"],
        "tool_avg_ms": tools["avg_ms"] if tools["count"] else None,
        "skill_calls": s["skill_calls"]["count"],
        "shell_calls": shells["count"],
        "shell_exit_codes": shells["exit_codes"],
        "shell_avg_ms": shells["avg_ms"] if shells["count"] else None,
        "redundant_calls": len(s["redundant_calls"]),
        "duration_ms": s["duration_ms"],
        "tasks": s["tasks"] if len(s["tasks"]) > 1 else [],
        "calls": [(str(c["tool_name"]), c["status"] == "ok", as_int(c["duration_ms"]))
                  for c in s["tool_calls"]["calls"]],
    }


def stats(values: list[float]) -> dict[str, Any]:
    """total, mean, population standard deviation (0 for one value), min, max; None for no values."""
    if not values:
        return {"total": 0, "mean": None, "stddev": None, "min": None, "max": None}
    average = sum(values) / len(values)
    spread = math.sqrt(sum((v - average) ** 2 for v in values) / len(values)) if len(values) > 1 else 0.0
    return {"total": sum(values), "mean": average, "stddev": spread, "min": min(values), "max": max(values)}


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Status breakdown, per-metric statistics, per-task statistics and per-tool usage over the rows."""
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    metrics = {key: stats([row[key] for row in rows if row[key] is not None]) for key, _, _ in METRICS}
    tasks = [t for row in rows for t in row["tasks"]]
    task_metrics = {key: stats([as_int(t.get(key)) for t in tasks]) for key, _, _ in TASK_METRICS}
    tools: dict[str, dict[str, Any]] = {}
    for row in rows:
        for name, ok, ms in row["calls"]:
            t = tools.setdefault(name, {"tool": name, "calls": 0, "errors": 0, "total_ms": 0, "sessions": set()})
            t["calls"] += 1
            t["errors"] += not ok
            t["total_ms"] += ms
            t["sessions"].add(row["session_id"])
    ranked = sorted(tools.values(), key=lambda t: (-t["calls"], t["tool"]))
    return {
        "count": len(rows),
        "status": dict(sorted(statuses.items())),
        "metrics": metrics,
        "tasks": {"count": len(tasks), "metrics": task_metrics},
        "tools": [{"tool": t["tool"], "calls": t["calls"], "errors": t["errors"],
                   "error_rate": round(t["errors"] / t["calls"], 4), "avg_ms": t["total_ms"] // t["calls"],
                   "sessions": len(t["sessions"])} for t in ranked],
    }


def report(addresses: list[str], workdir: Path, last: int | None = None, since: str | None = None,
           now_ms: int | None = None) -> dict[str, Any]:
    """Select, read and aggregate sessions (what `--json` emits)."""
    from mur.trace.reader import load_events
    from mur.trace.sessions import resolve_trace

    if last is not None and last < 1:
        raise MurError("E-TRC-002", "--last must be at least 1", "e.g. --last 5")
    older = 0
    if addresses:
        paths = list(dict.fromkeys(resolve_trace(a, workdir) for a in addresses))
    else:
        paths, older = _select(workdir, last, since, now_ms)
    rows, skipped = [], []
    for path in paths:
        try:
            rows.append(session_row(load_events(path), path))
        except MurError as exc:
            skipped.append({"session": path.parent.name, "trace": str(path), "code": exc.code, "message": exc.message})
    if not rows:
        names = ", ".join(f"{s['session']} ({s['code']})" for s in skipped)
        raise MurError("E-TRC-001", "no complete sessions to report — all traces are empty or incomplete",
                       hint=f"skipped: {names}")
    return {"workdir": str(workdir), "since": since, "last": last, **aggregate(rows),
            "sessions": [{k: v for k, v in r.items() if k != "calls"} for r in rows],
            "excluded_older": older, "skipped": skipped}


def _select(workdir: Path, last: int | None, since: str | None, now_ms: int | None) -> tuple[list[Path], int]:
    """The traces of the workdir's sessions, oldest first, within `since` then the `last` N; and how
    many `since` left out."""
    from mur.trace.sessions import TRACE_FILE, list_sessions, workdir_hint

    hint = workdir_hint(workdir)
    if not workdir.is_dir():
        raise MurError("E-IO-001", f"workdir not found: {workdir}", hint=hint)
    sessions = list_sessions(workdir)
    if not sessions:
        raise MurError("E-TRC-002", f"no sessions found in workdir at {workdir}", hint=hint)
    older = 0
    if since is not None:
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - parse_duration(since)
        kept = [s for s in sessions if (created_ms(s.name) or -1) >= cutoff]
        older, sessions = len(sessions) - len(kept), kept
        if not sessions:
            raise MurError("E-TRC-002", f"no sessions matched --since {since} in workdir at {workdir}",
                           hint=f"{older} older session(s) there; widen --since")
    if last:
        sessions = sessions[-last:]
    return [s / TRACE_FILE for s in sessions], older
