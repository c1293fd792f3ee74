"""`eval.jsonl` (written by murmur-hook-eval) read back for `mur eval show` (upstream section 8).

Records, one JSON object per line, told apart by `record_type`:

  event_score  {"ts","turn","event_type","scorer","result":"pass|fail","score","reason"}
  dataset_run  {"ts","dataset_id","case_id","overall":"pass|fail|no_scores|config_error","scores":{...}}
               (exactly one, last)

A line that is not such a record is E-EVAL-001 (`<path>:<line>: <why>`). Sessions are addressed like
`mur trace` (mur.trace.sessions: full id, id suffix, @N, or a path); a session with no
eval.jsonl is E-EVAL-002. The hook writes eval.jsonl into the directory its grant preopens; with the
usual grant (`filesystem.scope: .`) that is the tools' workdir: the session directory's work/ by
default (the session directory itself in older runs), DIR with `mur run --workdir DIR` (name the
file by path then: `mur eval show DIR/eval.jsonl`; older runs kept the session in DIR/.murmur/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mur.errors import MurError
from mur.fsafe import LinkRefused
from mur.jsonl import BadLine, read_records
from mur.paths import MURMUR_DIR

EVAL_FILE = "eval.jsonl"
RULE = "─" * 37
WORST_EVENTS = 5


def resolve_eval(selector: str | None, workdir: Path) -> Path:
    """The eval.jsonl a session address names (E-EVAL-002 when there is none)."""
    from mur.trace.sessions import list_sessions, resolve_trace, workdir_hint

    address = (selector or "").strip()
    if address and ("/" in address or address.endswith(".jsonl")):
        path = Path(address)
        target = path / EVAL_FILE if path.is_dir() else path
        if not target.is_file():
            raise MurError("E-IO-001", f"eval file not found: {target}")  # upstream's words
        return target
    if not address and not list_sessions(workdir):
        raise MurError("E-EVAL-002", f"no sessions found in workdir at {workdir}", workdir_hint(workdir))
    try:
        session = resolve_trace(address or None, workdir).parent
    except MurError as exc:
        raise MurError("E-EVAL-002", exc.message, exc.hint) from exc
    for candidate in _candidates(session):
        if candidate.is_file():
            return candidate
    raise MurError(
        "E-EVAL-002",
        f"no eval file for session {session.name} (expected {session / 'work' / EVAL_FILE})",
        "declare the murmur-hook-eval hook with a filesystem grant (capabilities: {filesystem: {scope: .}}) "
        "and observability.eval.scorers in murmur.yaml (docs/hooks.md)",
    )


def _candidates(session: Path) -> list[Path]:
    out = [session / "work" / EVAL_FILE, session / EVAL_FILE]
    if session.parent.name == MURMUR_DIR:
        out.append(session.parent.parent / EVAL_FILE)
    return out


def load_eval(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """(event_score records, the dataset_run record or None); E-EVAL-001 on a bad line. The hook
    writes the file where tools can write too, so a symlink or hard link there is E-IO-002."""
    try:
        records = read_records(path, tool_writable=True)
    except FileNotFoundError as exc:
        raise MurError("E-IO-001", f"eval file not found: {path}") from exc
    except BadLine as exc:
        raise MurError("E-EVAL-001", str(exc)) from exc
    except LinkRefused as exc:
        raise MurError("E-IO-002", f"refused to read {path}: {exc.strerror or exc}",
                       "eval.jsonl must be a regular file the hook wrote, not a link") from exc
    except OSError as exc:
        raise MurError("E-IO-003", f"failed to read {path}: {exc.strerror or exc}") from exc
    scores: list[dict[str, Any]] = []
    run: dict[str, Any] | None = None
    for number, record in records:
        where = f"{path}:{number}"
        kind = record.get("record_type") if isinstance(record, dict) else None
        if kind == "event_score":
            for key in ("scorer", "result"):
                if not isinstance(record.get(key), str):
                    raise MurError("E-EVAL-001", f"{where}: event_score record has no string '{key}'")
            scores.append(record)
        elif kind == "dataset_run":
            if not isinstance(record.get("overall"), str):
                raise MurError("E-EVAL-001", f"{where}: dataset_run record has no string 'overall'")
            if not isinstance(record.get("scores", {}), dict):
                raise MurError("E-EVAL-001", f"{where}: dataset_run 'scores' is not an object")
            run = record
        else:
            raise MurError("E-EVAL-001", f"{where}: unknown record_type {kind!r} (expected event_score or dataset_run)")
    return scores, run


def summarize(scores: list[dict[str, Any]], run: dict[str, Any] | None) -> dict[str, Any]:
    """`mur eval show --json`: {"overall", "scorers": {name: {pass, fail, total, pass_rate}}, "dataset_run"}."""
    scorers: dict[str, dict[str, Any]] = {}
    for record in scores:
        entry = scorers.setdefault(record["scorer"], {"pass": 0, "fail": 0, "total": 0, "pass_rate": 0.0})
        entry["pass" if record["result"] == "pass" else "fail"] += 1
    for entry in scorers.values():
        entry["total"] = entry["pass"] + entry["fail"]
        entry["pass_rate"] = entry["pass"] / entry["total"] if entry["total"] else 0.0
    if run is not None:
        overall = run["overall"]
    elif not scorers:
        overall = "no_scores"
    else:
        overall = "pass" if all(e["fail"] == 0 and e["pass"] > 0 for e in scorers.values()) else "fail"
    return {"overall": overall, "scorers": dict(sorted(scorers.items())), "dataset_run": run}


def show(selector: str | None, workdir: Path) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    """Resolve, parse and summarize one session's eval file."""
    path = resolve_eval(selector, workdir)
    scores, run = load_eval(path)
    return summarize(scores, run), scores, path


def render(summary: dict[str, Any], scores: list[dict[str, Any]], path: Path) -> str:
    """The human form: Scorers, Overall, Score summary, Worst events (upstream's sections)."""
    out = [f"── Eval: {path} {RULE}"]
    run = summary["dataset_run"]
    if not scores and run is None:
        out.append("  (no scored events)")
        return "\n".join(out) + "\n"
    out += ["", f"── Scorers {RULE}"]  # upstream prints the heading even when only a dataset_run was written
    if summary["scorers"]:
        for name, entry in summary["scorers"].items():
            out.append(f"  {name:<24} {entry['pass']}/{entry['total']} pass  ({100.0 * entry['pass_rate']:.1f}%)")
    out += ["", f"── Overall {RULE}", f"  result:  {summary['overall']}"]
    if run is not None:
        if run.get("case_id"):
            out.append(f"  case:    {run['case_id']}")
        if run.get("dataset_id"):
            out.append(f"  dataset: {run['dataset_id']}")
        if isinstance(run.get("config_error"), dict):
            err = run["config_error"]
            out.append(f"  config error at '{err.get('key')}': {err.get('message')}")
        if run.get("scores"):
            out += ["", f"── Score summary {RULE}"]
            for name in sorted(run["scores"]):
                out.append(f"  {name:<24} {float(run['scores'][name]):.4f}")
    if scores:
        out += ["", f"── Worst events {RULE}"]
        fails = sorted((s for s in scores if s["result"] == "fail"), key=lambda s: (s["scorer"], s.get("turn") or 0))
        for rec in fails[:WORST_EVENTS]:
            out.append(f"  turn {int(rec.get('turn') or 0):>3}  {str(rec.get('event_type', '')):12}  "
                       f"{rec['scorer']:<24} {rec['result']}  score={float(rec.get('score') or 0.0):.2f}"
                       + (f"  ({rec['reason']})" if rec.get("reason") else ""))
        if not fails:
            out.append("  (no failing events)")
    return "\n".join(out) + "\n"
