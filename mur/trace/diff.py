"""`mur trace diff`: two sessions side by side (upstream cli.md "mur trace diff").

Run A is BEFORE (default `@2`), run B is AFTER (default `@1`); both addresses or neither (one alone is
E-TRC-002, as upstream). Each trace is summarized exactly as `mur trace show` does, so the numbers
agree with it. The table is upstream's (its rows, values and deltas: `+3 (A better)`, `-1.3s (B
better)`, `=`), plus a `tool errors` row. Lower is better for turns, tokens, calls and latencies;
higher is better for the tool success rate; exit status and compaction have no direction (`=` or
`changed`). Below the
metrics, the tool calls: how often each tool was called in A and in B, the tools B added or dropped,
and the two call sequences aligned (difflib's longest matching blocks): `=` kept, `-` only in A,
`+` only in B.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.humanize import plain
from mur.trace.fmt import NOTHING, fmt_ms, heading

_LOWER, _HIGHER, _NONE = "lower", "higher", None
# (label, key, format, which value is better)
METRICS = (
    ("turns", "turns", "int", _LOWER),
    ("duration", "duration_ms", "ms", _LOWER),
    ("input tokens", "input_tokens", "tokens", _LOWER),
    ("output tokens", "output_tokens", "tokens", _LOWER),
    ("input/turn (avg)", "input_per_turn", "avg", _LOWER),
    ("output/turn (avg)", "output_per_turn", "avg", _LOWER),
    ("tool calls", "tool_calls", "int", _LOWER),
    ("tool errors", "tool_errors", "int", _LOWER),
    ("tool success rate", "tool_success_pct", "pct", _HIGHER),
    ("avg tool latency", "tool_avg_ms", "ms", _LOWER),
    ("skill calls", "skill_calls", "int", _LOWER),
    ("shell calls", "shell_calls", "int", _LOWER),
    ("avg shell latency", "shell_avg_ms", "ms", _LOWER),
    ("compaction", "compaction", "text", _NONE),
    ("exit status", "status", "text", _NONE),
)
COLUMNS = (22, 16, 16, 26)


def metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """The comparable numbers of one `mur trace show` summary (None where a value does not exist)."""
    turns = summary["turns"]["count"]
    tools, shells = summary["tool_calls"], summary["shell_calls"]
    compaction = summary["compaction"]
    return {
        "turns": turns,
        "duration_ms": summary["duration_ms"],
        "input_tokens": summary["tokens"]["input"],
        "output_tokens": summary["tokens"]["output"],
        "input_per_turn": summary["tokens"]["avg_input_per_turn"],
        "output_per_turn": summary["tokens"]["avg_output_per_turn"],
        "tool_calls": tools["count"],
        "tool_errors": tools["error"],
        "tool_success_pct": 100.0 * tools["ok"] / tools["count"] if tools["count"] else None,
        "tool_avg_ms": tools["avg_ms"] if tools["count"] else None,
        "skill_calls": summary["skill_calls"]["count"],
        "shell_calls": shells["count"],
        "shell_avg_ms": shells["avg_ms"] if shells["count"] else None,
        "compaction": ", ".join(f"turn {c['turn']}" for c in compaction) if compaction else "none",
        "status": str(summary["status"]),
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Diff two `mur trace show` summaries (what `--json` emits, less the session identities)."""
    ma, mb = metrics(a), metrics(b)
    rows = []
    for label, key, fmt, better in METRICS:
        va, vb = ma[key], mb[key]
        delta, verdict = _delta(va, vb, fmt, better)
        rows.append({"metric": label, "key": key, "format": fmt, "a": va, "b": vb, "delta": delta,
                     "verdict": verdict})
    return {"metrics": rows, "tools": tool_diff(_sequence(a), _sequence(b))}


def tool_diff(seq_a: list[str], seq_b: list[str]) -> dict[str, Any]:
    """Which tools each run called, in what order, and what B added or dropped."""
    names = sorted(set(seq_a) | set(seq_b), key=lambda n: (-(seq_a.count(n) + seq_b.count(n)), n))
    ops: list[dict[str, str]] = []
    matcher = difflib.SequenceMatcher(None, seq_a, seq_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            ops += [{"op": "=", "tool": t} for t in seq_a[i1:i2]]
            continue
        ops += [{"op": "-", "tool": t} for t in seq_a[i1:i2]]
        ops += [{"op": "+", "tool": t} for t in seq_b[j1:j2]]
    return {
        "a": seq_a,
        "b": seq_b,
        "same": seq_a == seq_b,
        "counts": [{"tool": n, "a": seq_a.count(n), "b": seq_b.count(n)} for n in names],
        "added": [n for n in names if n not in seq_a],
        "removed": [n for n in names if n not in seq_b],
        "ops": ops,
    }


def _sequence(summary: dict[str, Any]) -> list[str]:
    return [plain(c["tool_name"]) for c in summary["tool_calls"]["calls"]]


def _delta(va: Any, vb: Any, fmt: str, better: str | None) -> tuple[Any, str | None]:
    if va is None or vb is None:
        return None, None
    if fmt == "text":
        return None, "=" if va == vb else "changed"
    delta = round(vb - va, 4) if isinstance(vb - va, float) else vb - va
    if delta == 0 or (isinstance(delta, float) and abs(delta) < 0.05):  # what rounds to 0.0 is equal
        return delta, "="
    b_wins = (delta < 0) == (better == _LOWER)
    return delta, "B better" if b_wins else "A better"


def render(diff: dict[str, Any]) -> str:
    """The aligned table, then the tool calls compared."""
    out = [f"Run A: {diff['a']['session_id']}  ({diff['a']['trace']})",
           f"Run B: {diff['b']['session_id']}  ({diff['b']['trace']})", ""]
    out.append(_line("Metric", "Run A", "Run B", "Delta"))
    out.append(" ".join("─" * w for w in COLUMNS))
    for row in diff["metrics"]:
        out.append(_line(row["metric"], _value(row["a"], row["format"]), _value(row["b"], row["format"]),
                         _delta_text(row)))
    tools = diff["tools"]
    out += ["", heading("Tool calls")]
    if not tools["counts"]:
        out.append("no tool calls in either run")
        return "\n".join(out) + "\n"
    out.append(_line("Tool", "Run A", "Run B", "Delta"))
    out.append(" ".join("─" * w for w in COLUMNS))
    for count in tools["counts"]:
        d = count["b"] - count["a"]
        mark = ("  (added)" if count["tool"] in tools["added"]
                else "  (removed)" if count["tool"] in tools["removed"] else "")
        out.append(_line(count["tool"], str(count["a"]), str(count["b"]), ("=" if d == 0 else f"{d:+d}") + mark))
    out += ["", heading("Tool sequence (A → B)")]
    out.append(f"A: {' → '.join(tools['a']) or '(none)'}")
    out.append(f"B: {' → '.join(tools['b']) or '(none)'}")
    if tools["same"]:
        out.append(f"same sequence ({len(tools['a'])} call{'s' if len(tools['a']) != 1 else ''})")
    else:
        out.extend(_runs(tools["ops"]))
    return "\n".join(out) + "\n"


def _runs(ops: list[dict[str, str]]) -> list[str]:
    """The aligned sequence, one line per run of the same op on the same tool (`= bash ×3`)."""
    lines: list[str] = []
    i = 0
    while i < len(ops):
        j = i
        while j < len(ops) and ops[j] == ops[i]:
            j += 1
        times = f" ×{j - i}" if j - i > 1 else ""
        lines.append(f"  {ops[i]['op']} {ops[i]['tool']}{times}")
        i = j
    return lines


def _line(*cells: str) -> str:
    widths = COLUMNS[:-1]
    return ("".join(f"{c:<{w}} " if len(c) < w else f"{c} " for c, w in zip(cells, widths)) + cells[-1]).rstrip()


def _value(value: Any, fmt: str) -> str:
    """A cell as upstream writes it: counts with separators, averages whole, rates with one decimal."""
    if value is None:
        return NOTHING
    if fmt == "ms":
        return fmt_ms(value)
    if fmt == "pct":
        return f"{value:.1f}%"
    if fmt == "avg":
        return f"{value:.0f}"
    if fmt == "tokens":
        return f"{value:,}"
    return str(value)


def _delta_text(row: dict[str, Any]) -> str:
    """`+3 (A better)`, `-1.3s (B better)`, `+33.3 (B better)` (no separators, as upstream), `=`."""
    verdict, delta, fmt = row["verdict"], row["delta"], row["format"]
    if verdict is None:
        return NOTHING
    if verdict in ("=", "changed"):
        return verdict
    if fmt == "ms":
        text = ("+" if delta > 0 else "-") + fmt_ms(abs(delta))
    elif fmt in ("pct", "avg"):
        text = f"{delta:+.1f}"
    else:
        text = f"{delta:+d}"
    return f"{text} ({verdict})"


def _labelled(label: str, address: str, workdir: Path, summarize: Any) -> tuple[Any, MurError | None]:
    """One side of a diff, or its error prefixed `before: ` / `after: ` (upstream's labels)."""
    try:
        return summarize(address, workdir), None
    except MurError as exc:
        return None, MurError(exc.code, f"{label}: {exc.message}", exc.hint)


def show(before: str | None, after: str | None, workdir: Path) -> dict[str, Any]:
    """Resolve both addresses (default `@2 @1`) and compare the sessions (E-TRC-001/002)."""
    from mur.trace.summary import show as summarize_session

    if (before is None) != (after is None):
        raise MurError("E-TRC-002", "mur trace diff expects 0 or 2 arguments, got 1. Usage: mur trace diff "
                       "[<before> <after>]", hint="with none it compares @2 (Run A) with @1 (Run B)")
    a, a_err = _labelled("before", before or "@2", workdir, summarize_session)
    b, b_err = _labelled("after", after or "@1", workdir, summarize_session)
    if a_err is not None and b_err is not None:  # both named, as upstream does
        raise MurError("E-TRC-002", f"{a_err.message}\n{b_err.message}", a_err.hint)
    if a_err is not None or b_err is not None:
        raise a_err or b_err
    diff = compare(a, b)
    diff["a"] = {"session_id": a["session_id"], "trace": a["trace"], "status": a["status"]}
    diff["b"] = {"session_id": b["session_id"], "trace": b["trace"], "status": b["status"]}
    return {"a": diff.pop("a"), "b": diff.pop("b"), **diff}
