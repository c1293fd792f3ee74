"""`mur trace report`'s text: upstream's per-session blocks, statistics table, exit status breakdown
and per-task averages (scripts read them), then mur's most used tools.

  Session ses_019f01a9...  2.0s  3 turns

    Id:            ses_019f01a940ce7761854e768ecbe30002     (mur)
    Status:        failed  (started 2025-10-09 08:53:20 UTC) (mur)
    Tool calls:    3  (2 ok, 1 error)
    Shell calls:   1  exit codes: 1 ok
    Redundant calls: 1
    Avg latency:   tool 34ms  shell 25ms

Upstream leaves out the error count when nothing failed, the shell line without shell calls, the
redundant line without redundant calls, and the latency line without tool calls; so does mur.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from mur.trace.fmt import as_int, fmt_exit_codes, fmt_ms, fmt_session_short, heading, plural
from mur.trace.report import METRICS, TASK_METRICS

TOP_TOOLS = 10
COLUMNS = (22, 14, 14, 14, 14)


def render(rep: dict[str, Any]) -> str:
    """Per-session blocks, then the statistics, the exit statuses, per-task averages and the tools."""
    out: list[str] = []
    for s in rep["sessions"]:
        out.extend(_block(s))
    n = rep["count"]
    window = (f"  last {rep['last']}" if rep["last"] else "") + (f"  since {rep['since']}" if rep["since"] else "")
    out += [f"Sessions: {n}  ({rep['workdir']}){window}", ""]
    out.extend(_table(rep["metrics"], METRICS))
    out += ["", "Exit status:"]
    out.extend(f"  {status:<24} {count}  ({100.0 * count / n:.1f}%)" for status, count in rep["status"].items())
    if rep["tasks"]["count"]:
        out += ["", "── Per-task averages (multi-task sessions only) ──────────────"]
        out.extend(_table(rep["tasks"]["metrics"], TASK_METRICS))
        out.append(f"Tasks: {rep['tasks']['count']}")
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


def _block(s: dict[str, Any]) -> list[str]:
    out = [f"Session {fmt_session_short(s['session_id'])}  {fmt_ms(s['duration_ms'])}  {plural(s['turns'], 'turn')}",
           "", _field("Id:", s["session_id"]), _field("Status:", f"{s['status']}  (started {_when(s['started_ms'])})")]
    errors = f"  ({s['tool_ok']} ok, {s['tool_errors']} error)" if s["tool_errors"] else ""
    out.append(_field("Tool calls:", f"{s['tool_calls']}{errors}"))
    if s["shell_calls"]:
        codes = fmt_exit_codes({as_int(k): v for k, v in s["shell_exit_codes"].items()})
        out.append(_field("Shell calls:", f"{s['shell_calls']}  exit codes: {codes}"))
    if s["redundant_calls"]:
        out.append(f"  Redundant calls: {s['redundant_calls']}")
    if s["tool_avg_ms"] is not None:
        shell = f"  shell {fmt_ms(s['shell_avg_ms'])}" if s["shell_avg_ms"] is not None else ""
        out.append(_field("Avg latency:", f"tool {fmt_ms(s['tool_avg_ms'])}{shell}"))
    return out + [""]


def _field(label: str, value: Any) -> str:
    return f"  {label:<14} {value}"


def _table(metrics: dict[str, dict[str, Any]], rows: tuple) -> list[str]:
    """`Metric  Mean  StdDev  Min  Max` (upstream's columns); a metric without values has no row."""
    out = [_line("Metric", "Mean", "StdDev", "Min", "Max"), " ".join("─" * w for w in COLUMNS)]
    for key, label, kind in rows:
        m = metrics[key]
        if m["mean"] is None:
            continue
        cell = (lambda v: f"{v:.1f}") if kind == "n" else (lambda v: f"{int(v):,}")
        out.append(_line(label, cell(m["mean"]), cell(m["stddev"]), cell(m["min"]), cell(m["max"])))
    return out


def _line(*cells: str) -> str:
    return " ".join(f"{c:<{w}}" for c, w in zip(cells[:-1], COLUMNS)) + " " + cells[-1]


def _when(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "—"
