"""`mur eval diff`: two sessions' eval.jsonl side by side (upstream.md section 8, cli.md "mur eval diff").

Each side is read and summarized as `mur eval show` does (mur.eval.file). Per scorer,
its pass rate in each run (percent), and the delta in percentage points: `+Npp (B better)`,
`-Npp (A better)`, `=` for equal rates, `(A only)` / `(B only)` for a scorer one run lacks. A last
`overall` row compares the two overall results (pass beats fail). Run A defaults to `@2`, run B to
`@1`; one address alone is E-EVAL-002 (as upstream). E-EVAL-001: a file does not parse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mur.errors import MurError

COLUMNS = (24, 14, 14, 26)
_RANK = {"pass": 1, "fail": 0}


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Diff two `mur eval show --json` summaries: per-scorer rows and the overall row."""
    rows = []
    for name in sorted(set(a["scorers"]) | set(b["scorers"])):
        ra = a["scorers"].get(name, {}).get("pass_rate")
        rb = b["scorers"].get(name, {}).get("pass_rate")
        if ra is None or rb is None:
            rows.append({"scorer": name, "a": ra, "b": rb, "delta_pp": None,
                         "verdict": "A only" if rb is None else "B only"})
            continue
        delta = round(100.0 * (rb - ra), 1)
        verdict = "=" if delta == 0 else "B better" if delta > 0 else "A better"
        rows.append({"scorer": name, "a": ra, "b": rb, "delta_pp": delta, "verdict": verdict})
    oa, ob = a["overall"], b["overall"]
    if oa == ob:
        overall_verdict = "="
    elif oa in _RANK and ob in _RANK:
        overall_verdict = "B better" if _RANK[ob] > _RANK[oa] else "A better"
    else:
        overall_verdict = "changed"
    return {"scorers": rows, "overall": {"a": oa, "b": ob, "verdict": overall_verdict}}


def render(diff: dict[str, Any]) -> str:
    """The `Scorer  Run A  Run B  Delta` table and the overall row."""
    out = [f"Run A: {diff['a']['eval']}", f"Run B: {diff['b']['eval']}", ""]
    out.append(_line("Scorer", "Run A", "Run B", "Delta"))
    out.append(" ".join("─" * w for w in COLUMNS))
    if not diff["scorers"]:
        out.append("(no scored events in either run)")
    for row in diff["scorers"]:
        out.append(_line(row["scorer"], _rate(row["a"]), _rate(row["b"]), _delta(row)))
    overall = diff["overall"]
    verdict = {"=": "=", "changed": ""}.get(overall["verdict"], f"({overall['verdict']})")
    out += ["", _line("overall", str(overall["a"]), str(overall["b"]), verdict)]
    return "\n".join(out) + "\n"


def _line(*cells: str) -> str:
    widths = COLUMNS[:-1]
    return ("".join(f"{c:<{w}} " if len(c) < w else f"{c} " for c, w in zip(cells, widths)) + cells[-1]).rstrip()


def _rate(rate: float | None) -> str:
    return "—" if rate is None else f"{100.0 * rate:.1f}%"


def _delta(row: dict[str, Any]) -> str:
    if row["verdict"] in ("A only", "B only"):
        return f"({row['verdict']})"
    if row["verdict"] == "=":
        return "="
    return f"{row['delta_pp']:+.1f}pp ({row['verdict']})"


def show(a: str | None, b: str | None, workdir: Path) -> dict[str, Any]:
    """Resolve both addresses (default `@2 @1`), read both eval files and compare them."""
    from mur.eval.file import show as show_eval

    if (a is None) != (b is None):
        raise MurError("E-EVAL-002", "eval diff takes two session addresses (A B) or none",
                       hint="with none it compares @2 (Run A) with @1 (Run B)")
    sa, _, pa = show_eval(a or "@2", workdir)
    sb, _, pb = show_eval(b or "@1", workdir)
    return {"a": {"eval": str(pa), "overall": sa["overall"]}, "b": {"eval": str(pb), "overall": sb["overall"]},
            **compare(sa, sb)}
