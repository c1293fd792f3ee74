"""`mur trace report`: aggregate statistics over several sessions (upstream cli.md "mur trace report").

The set: the sessions named (any session address, each counted once), else every session in the
workdir, narrowed by `--last N` (the N most recently created session directories) and then by
`--since D` (sessions whose first `session_start` timestamp, Unix ms, lies within D of now; D is
`<n>s`, `<n>m`, `<n>h` or `<n>d`). Each session is summarized as `mur trace show` does. A session
whose trace does not parse or is incomplete (still running, killed) is skipped and reported in
`skipped` (the CLI prints a note on stderr) rather than failing the whole report; when nothing is
left, E-TRC-001 (nothing readable) or E-TRC-002 (nothing in the window, or no sessions at all).
"""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.trace import events as ev
from mur.trace.timeline import as_int, fmt_ms, heading

_DURATION = re.compile(r"\s*(\d+)\s*([smhd])\s*")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
METRICS = (
    ("turns", "turns"),
    ("input tokens", "input_tokens"),
    ("output tokens", "output_tokens"),
    ("tool calls", "tool_calls"),
    ("tool errors", "tool_errors"),
    ("skill calls", "skill_calls"),
    ("shell calls", "shell_calls"),
    ("duration (ms)", "duration_ms"),
)
TOP_TOOLS = 10


def parse_duration(text: str) -> int:
    """`30m`, `2h`, `1d`, `45s` -> milliseconds; ValueError for anything else (or zero)."""
    match = _DURATION.fullmatch(text or "")
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"'{text}' is not a duration: write <n>s, <n>m, <n>h or <n>d (e.g. 30m, 2h, 1d)")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def session_row(events: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    """One session's line in the report (E-TRC-001 when its trace is incomplete)."""
    from mur.trace.timeline import summarize

    s = summarize(events, str(path))
    start = next(e for e in events if e["event_type"] == ev.SESSION_START)
    return {
        "session_id": str(s["session_id"] or path.parent.name),
        "trace": str(path),
        "started_ms": as_int(start.get("timestamp")),
        "status": str(s["status"] or "unknown"),  # a session_end without exit_status is still counted
        "turns": s["turns"]["count"],
        "input_tokens": s["tokens"]["input"],
        "output_tokens": s["tokens"]["output"],
        "tool_calls": s["tool_calls"]["count"],
        "tool_errors": s["tool_calls"]["error"],
        "skill_calls": s["skill_calls"]["count"],
        "shell_calls": s["shell_calls"]["count"],
        "duration_ms": s["duration_ms"],
        "calls": [(str(c["tool_name"]), c["status"] == "ok", as_int(c["duration_ms"]))
                  for c in s["tool_calls"]["calls"]],
    }


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Status breakdown, per-metric total/mean/min/max, and per-tool usage over the session rows."""
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    metrics = {}
    for _, key in METRICS:
        values = [row[key] for row in rows]
        metrics[key] = {"total": sum(values), "mean": round(sum(values) / len(values), 1),
                        "min": min(values), "max": max(values)}
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
        "status": dict(sorted(statuses.items(), key=lambda kv: (-kv[1], kv[0]))),
        "metrics": metrics,
        "tools": [{"tool": t["tool"], "calls": t["calls"], "errors": t["errors"],
                   "error_rate": round(t["errors"] / t["calls"], 4), "avg_ms": t["total_ms"] // t["calls"],
                   "sessions": len(t["sessions"])} for t in ranked],
    }


def report(addresses: list[str], workdir: Path, last: int | None = None, since: str | None = None,
           now_ms: int | None = None) -> dict[str, Any]:
    """Select, read and aggregate sessions (what `--json` emits)."""
    from mur.trace.sessions import TRACE_FILE, list_sessions, resolve_trace
    from mur.trace.reader import load_events

    if addresses:
        paths = list(dict.fromkeys(resolve_trace(a, workdir) for a in addresses))
    else:
        if not workdir.is_dir():
            raise MurError("E-IO-001", f"workdir not found: {workdir}",
                           hint="pass --workdir DIR (the directory holding the ses_* session directories)")
        sessions = list_sessions(workdir)
        if not sessions:
            raise MurError("E-TRC-002", f"no sessions found in workdir at {workdir}",
                           hint="pass --workdir DIR (the directory holding the ses_* session directories)")
        if last:
            sessions = sessions[-last:]
        paths = [s / TRACE_FILE for s in sessions]
    rows, skipped = [], []
    for path in paths:
        try:
            rows.append(session_row(load_events(path), path))
        except MurError as exc:
            skipped.append({"session": path.parent.name, "trace": str(path), "code": exc.code, "message": exc.message})
    older = 0
    if since is not None:
        cutoff = (now_ms if now_ms is not None else int(time.time() * 1000)) - parse_duration(since)
        kept = [r for r in rows if r["started_ms"] >= cutoff]
        older, rows = len(rows) - len(kept), kept
    if not rows:
        if older:
            raise MurError("E-TRC-002", f"no session in {workdir} started within the last {since} "
                                        f"({older} older session(s))", hint="widen --since")
        names = ", ".join(f"{s['session']} ({s['code']})" for s in skipped)
        raise MurError("E-TRC-001", "no complete sessions to report — all traces are empty or incomplete",
                       hint=f"skipped: {names}")
    rows.sort(key=lambda r: (r["started_ms"], r["session_id"]))
    return {"workdir": str(workdir), "since": since, "last": last, **aggregate(rows),
            "sessions": [{k: v for k, v in r.items() if k != "calls"} for r in rows],
            "excluded_older": older, "skipped": skipped}


def render(rep: dict[str, Any]) -> str:
    """Sessions, the metric table, the exit status breakdown, and the most used tools."""
    n = rep["count"]
    window = (f"  last {rep['last']}" if rep["last"] else "") + (f"  since {rep['since']}" if rep["since"] else "")
    out = [f"Sessions: {n}  ({rep['workdir']}){window}", ""]
    out.append(f"{'Session':<37} {'Started (UTC)':<20} {'Status':<18} {'Turns':>5} {'In':>9} {'Out':>8} "
               f"{'Tools':>5} {'Shell':>5} {'Duration':>9}")
    for s in rep["sessions"]:
        out.append(f"{s['session_id']:<37} {_when(s['started_ms']):<20} {s['status']:<18} {s['turns']:>5} "
                   f"{s['input_tokens']:>9,} {s['output_tokens']:>8,} {s['tool_calls']:>5} {s['shell_calls']:>5} "
                   f"{fmt_ms(s['duration_ms']):>9}")
    out += ["", f"{'Metric':<22} {'Total':<14} {'Mean':<14} {'Min':<14} {'Max':<14}".rstrip()]
    out.append(" ".join(["─" * 22] + ["─" * 14] * 4))
    for label, key in METRICS:
        m = rep["metrics"][key]
        out.append(f"{label:<22} {m['total']:<14,} {m['mean']:<14,.1f} {m['min']:<14,} {m['max']:,}")
    out += ["", "Exit status:"]
    for status, count in rep["status"].items():
        out.append(f"  {status:<24} {count}  ({100.0 * count / n:.1f}%)")
    out += ["", heading("Tools (most used first)")]
    if not rep["tools"]:
        out.append("no tool calls")
    else:
        out.append(f"{'Tool':<22} {'Calls':>6} {'Errors':>7} {'Error rate':>11} {'Avg latency':>12} {'Sessions':>9}")
        for t in rep["tools"][:TOP_TOOLS]:
            out.append(f"{t['tool']:<22} {t['calls']:>6} {t['errors']:>7} {100.0 * t['error_rate']:>10.1f}% "
                       f"{fmt_ms(t['avg_ms']):>12} {t['sessions']:>9}")
        if len(rep["tools"]) > TOP_TOOLS:
            out.append(f"({len(rep['tools']) - TOP_TOOLS} more in --json)")
    return "\n".join(out) + "\n"


def _when(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "—"
