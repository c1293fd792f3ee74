"""`mur trace steps`: a session turn by turn (upstream cli.md "mur trace steps").

One row per agent turn, upstream's columns (scripts read them): the turn, its decision, the tool it
asked for (`—` for none) and how long the turn's first call took (`—` without a call):

  Session ses_…  (2 turns)  ok  500ms

    1  tool_call    bash        100ms
    2  end_turn     —           —

`--verbose` adds the first string of the call's input, quoted and cut to 60 characters. Under a row,
mur lists what the row does not say: a failed call with its reason (`error:`) and stderr tail, a
shell exit's meaning, any call after the first, a compaction, a hook's `run-inference` (`origin`)
and any unknown event type carrying that `turn`; with `--verbose` every call, with its input, traced
output and shell command. The trace is cut into attempts, one per `session_start`..`session_end`
pair; when it names tasks (`task_start`) or holds several attempts, each attempt gets a `task` line
and an `end` line. The trace must parse and hold a session_start and a session_end (E-TRC-001, as
`mur trace show`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mur.humanize import plain
from mur.trace import events as ev, failures
from mur.trace.fmt import as_int, cut, fmt_input, fmt_ms, plural, text as _text
from mur.trace.summary import require_session

VERBOSE_LIMIT = 60  # upstream's cut for the input summary; the detail lines keep to it too
TOOL_WIDTH = 12  # the tool column is at least this wide (upstream)
PAD, SUB = " " * 5, " " * 7  # detail lines sit under the decision column, their failure lines deeper
_CALLS = (ev.TOOL_CALL, ev.SKILL_CALL)
_TURN_EVENTS = (ev.INFERENCE, ev.TOOL_CALL, ev.SKILL_CALL, ev.SHELL, ev.COMPACTION)
_SKIP = ("session_id", "timestamp", "event_type", "turn")


def build_steps(events: list[dict[str, Any]], source: str = "trace.jsonl", verbose: bool = False) -> dict[str, Any]:
    """The turn-by-turn view of one session's events (what `--json` emits)."""
    require_session(events, source)
    attempts: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    task: dict[str, Any] | None = None
    for event in events:
        kind = event["event_type"]
        if kind == ev.TASK_START:
            task = event
        elif kind == ev.TASK_END:
            task = None
        elif kind == ev.SESSION_START:
            current = _attempt(event, task)
            attempts.append(current)
        elif kind == ev.SESSION_END:
            if current is not None:
                current["status"] = _text(event.get("exit_status"))
                current["duration_ms"] = as_int(event.get("duration_ms"))
            current = None
        elif current is not None and (kind in _TURN_EVENTS or "turn" in event):
            _file(current, event, verbose)
    for attempt in attempts:
        attempt["turns"] = [_finish(attempt["turns"][n], verbose) for n in sorted(attempt["turns"])]
    starts = [e for e in events if e["event_type"] == ev.SESSION_START]
    ends = [e for e in events if e["event_type"] == ev.SESSION_END]
    tasks = {a["task_id"] for a in attempts if a["task_id"] is not None}
    return {
        "session_id": _text(starts[0].get("session_id")),
        "status": _text(ends[-1].get("exit_status")),
        "turns": sum(1 for a in attempts for t in a["turns"] if t["decision"] is not None),
        "tasks": len(tasks),
        "verbose": verbose,
        "attempts": attempts,
    }


def _attempt(start: dict[str, Any], task: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "task_id": _text(task.get("task_id")) if task else None,
        "source": _text(task.get("source")) if task else None,
        "capsule": _text(start.get("capsule_name")),
        "version": _text(start.get("capsule_version")),
        "model": _text(start.get("model")),
        "status": None,  # stays None when the attempt has no session_end
        "duration_ms": None,
        "turns": {},
    }


def _file(attempt: dict[str, Any], event: dict[str, Any], verbose: bool) -> None:
    number = as_int(event.get("turn"))
    turn = attempt["turns"].setdefault(number, {
        "turn": number, "decision": None, "tool_name": None, "input_tokens": 0, "output_tokens": 0, "events": [],
        "_inputs": []})
    kind = event["event_type"]
    if kind == ev.INFERENCE and not event.get("origin") and turn["decision"] is None:
        turn.update(decision=_text(event.get("decision")) or "—", tool_name=_text(event.get("tool_name")),
                    input_tokens=as_int(event.get("input_tokens")), output_tokens=as_int(event.get("output_tokens")))
        return
    if kind == ev.TOOL_CALL:
        turn["_inputs"].append(event.get("input"))
    turn["events"].append(_step(event, verbose))


def _finish(turn: dict[str, Any], verbose: bool) -> dict[str, Any]:
    """The turn's row values: its first call's duration and, verbose, the first input summary."""
    first = next((row for row in turn["events"] if row["kind"] in _CALLS), None)
    turn["duration_ms"] = first["duration_ms"] if first is not None else None
    inputs = turn.pop("_inputs")
    if verbose:
        turn["input_summary"] = next((s for s in map(input_summary, inputs) if s), None)
    return turn


def input_summary(value: Any) -> str:
    """The first string in a call's input (keys in sorted order, depth first, as upstream), quoted and cut
    to VERBOSE_LIMIT characters with `…`; "" when it holds none."""
    def first(v: Any) -> str | None:
        if isinstance(v, str):
            return v
        items = [v[k] for k in sorted(v, key=str)] if isinstance(v, dict) else v if isinstance(v, list) else []
        return next((s for s in map(first, items) if s is not None), None)

    found = first(value)
    return "" if found is None else f'"{cut(found, VERBOSE_LIMIT)}"'


def _step(e: dict[str, Any], verbose: bool) -> dict[str, Any]:
    kind = e["event_type"]
    if kind == ev.TOOL_CALL:
        row = {"kind": kind, "name": _text(e.get("tool_name")), "status": _text(e.get("status")),
               "duration_ms": as_int(e.get("duration_ms")), "input_bytes": as_int(e.get("input_bytes")),
               "output_bytes": as_int(e.get("output_bytes"))}
        if e.get("state_effect"):
            row["state_effect"] = _text(e["state_effect"])
        _failure(row, e)
        if verbose:
            row["input"] = e.get("input")
            if "output" in e:
                row["output"] = e.get("output")
        return row
    if kind == ev.SKILL_CALL:
        return {"kind": kind, "name": _text(e.get("skill_name")), "status": _text(e.get("status")),
                "duration_ms": as_int(e.get("duration_ms")), "output_bytes": as_int(e.get("output_bytes"))}
    if kind == ev.SHELL:
        row = {"kind": kind, "binary": _text(e.get("binary")), "exit_code": as_int(e.get("exit_code")),
               "duration_ms": as_int(e.get("duration_ms")), "stdout_bytes": as_int(e.get("stdout_bytes")),
               "stderr_bytes": as_int(e.get("stderr_bytes"))}
        if e.get("resource_limit"):
            row["resource_limit"] = _text(e["resource_limit"])
        if row["exit_code"] != 0:
            row["meaning"] = failures.exit_meaning(row["exit_code"])
            row["stderr_tail"] = failures.shell_stderr(e)
        if verbose:
            row["command"] = _command(e.get("command"))
        return row
    if kind == ev.COMPACTION:
        return {"kind": kind, "tokens_before": as_int(e.get("tokens_before")),
                "tokens_after": as_int(e.get("tokens_after"))}
    if kind == ev.INFERENCE:  # a hook's run-inference, or a second agent inference on one turn
        return {"kind": kind, "origin": _text(e.get("origin")), "decision": _text(e.get("decision")),
                "tool_name": _text(e.get("tool_name")), "input_tokens": as_int(e.get("input_tokens")),
                "output_tokens": as_int(e.get("output_tokens"))}
    fields = {k: v for k, v in e.items() if k not in _SKIP and (v is None or isinstance(v, (str, int, float, bool)))}
    return {"kind": kind, "fields": fields}


def _failure(row: dict[str, Any], e: dict[str, Any]) -> None:
    """A failed call's reason (and, from a trace older than `stderr_tail`, the stderr its output holds)."""
    if row["status"] == "ok":
        return
    row["error"] = failures.tool_error(e)
    if "error" not in e and failures.output_stderr(e):
        row["stderr_tail"] = failures.output_stderr(e)


def _failure_lines(row: dict[str, Any], pad: str) -> list[str]:
    lines = []
    if row.get("error"):
        lines.append(f"{pad}error:  {row['error']}")
    elif row.get("meaning"):
        lines.append(f"{pad}means:  {row['meaning']}")
    if row.get("stderr_tail"):
        first, *rest = str(row["stderr_tail"]).split("\n")
        lines.append(f"{pad}stderr: {first}")
        lines.extend(f"{pad}        {line}" for line in rest)
    return lines


def render(steps: dict[str, Any]) -> str:
    """The human form: the header, then the turn rows (per attempt when there are tasks or several)."""
    s = steps
    attempts = s["attempts"]
    duration = sum(as_int(a["duration_ms"]) for a in attempts)
    out = [f"Session {s['session_id']}  ({plural(s['turns'], 'turn')})  {s['status'] or '—'}  {fmt_ms(duration)}"]
    width = max([TOOL_WIDTH] + [len(t["tool_name"] or "—") for a in attempts for t in a["turns"]])
    grouped = len(attempts) > 1 or any(a["task_id"] is not None for a in attempts)
    seen: dict[str | None, int] = {}
    for attempt in attempts:
        if grouped or attempt is attempts[0]:
            out.append("")
        if grouped:
            n = seen[attempt["task_id"]] = seen.get(attempt["task_id"], 0) + 1
            again = f"  attempt {n}" if n > 1 else ""
            out.append(f"task {attempt['task_id']}  ({attempt['source'] or '—'}){again}" if attempt["task_id"]
                       else f"attempt {n}")
            if not attempt["turns"]:
                out.append("  (no turns)")
        for turn in attempt["turns"]:
            out.extend(_turn_lines(turn, width, s["verbose"]))
        if grouped:
            agent_turns = sum(1 for t in attempt["turns"] if t["decision"] is not None)
            out.append("  end  —  (no session_end)" if attempt["status"] is None else
                       f"  end  {attempt['status']}  {plural(agent_turns, 'turn')}  {fmt_ms(attempt['duration_ms'])}")
    return "\n".join(out) + "\n"


def _turn_lines(turn: dict[str, Any], width: int, verbose: bool) -> list[str]:
    """Upstream's row (`  1  tool_call    bash        100ms`), then what it does not say."""
    ms = turn["duration_ms"]
    cells = f"  {turn['turn']:<3}{turn['decision'] or '—':<13}{turn['tool_name'] or '—':<{width}}"
    summary = turn.get("input_summary") if verbose else None
    duration = fmt_ms(ms) if ms is not None else "—"
    lines = [f"{cells}{duration:<5}   {summary}" if summary else f"{cells}{duration}"]
    calls = [row for row in turn["events"] if row["kind"] in _CALLS]
    previous: dict[str, Any] = {}
    for row in turn["events"]:
        if row["kind"] == ev.SHELL and previous.get("error"):  # its tool_call line said why already
            row = {**row, "meaning": None}
        previous = row
        if verbose or _unsaid(row, calls):
            lines.extend(_row_lines(row))
    return lines


def _unsaid(row: dict[str, Any], calls: list[dict[str, Any]]) -> bool:
    """Whether a turn's row leaves this event out: a failure, a call after the first, anything not a call."""
    if row["kind"] in _CALLS:
        return row["status"] != "ok" or row is not calls[0]
    if row["kind"] == ev.SHELL:
        return row["exit_code"] != 0
    return True


def _row_lines(row: dict[str, Any]) -> list[str]:
    kind = row["kind"]
    if kind == ev.TOOL_CALL:
        mark = "✓" if row["status"] == "ok" else "✗"
        effect = f"  {row['state_effect']}" if row.get("state_effect") else ""
        lines = [f"{PAD}tool_call   {plain(row['name'])}  {mark} {plain(row['status'])}  {fmt_ms(row['duration_ms'])}  "
                 f"in {fmt_bytes(row['input_bytes'])}  out {fmt_bytes(row['output_bytes'])}{effect}"]
        lines.extend(_failure_lines(row, SUB))
        if "input" in row:
            lines.append(f"{SUB}input:  " + (fmt_input(row["input"], VERBOSE_LIMIT).strip() or "—"))
        if "output" in row:
            lines.append(f"{SUB}output: " + (fmt_input(row["output"], VERBOSE_LIMIT).strip() or "—"))
        return lines
    if kind == ev.SKILL_CALL:
        mark = "✓" if row["status"] == "ok" else "✗"
        return [f"{PAD}skill_call  {plain(row['name'])}  {mark} {plain(row['status'])}  {fmt_ms(row['duration_ms'])}  "
                f"out {fmt_bytes(row['output_bytes'])}"]
    if kind == ev.SHELL:
        limit = f"  limit {row['resource_limit']}" if row.get("resource_limit") else ""
        lines = [f"{PAD}shell       {plain(row['binary'] or None)}  exit {plain(row['exit_code'])}  "
                 f"{fmt_ms(row['duration_ms'])}  stdout {fmt_bytes(row['stdout_bytes'])}  "
                 f"stderr {fmt_bytes(row['stderr_bytes'])}{limit}"]
        lines.extend(_failure_lines(row, SUB))
        if "command" in row:
            lines.append(f"{SUB}$ {row['command']}")
        return lines
    if kind == ev.COMPACTION:
        return [f"{PAD}compaction  {row['tokens_before']:,} → {row['tokens_after']:,} tokens"]
    if kind == ev.INFERENCE:
        decision = (row["decision"] or "—") + (f" → {row['tool_name']}" if row["tool_name"] else "")
        origin = f"  ({row['origin']})" if row["origin"] else ""
        return [f"{PAD}inference   {decision}  in {row['input_tokens']:,}  out {row['output_tokens']:,}{origin}"]
    fields = "  ".join(f"{k}={plain(v)}" for k, v in row["fields"].items() if v is not None)
    return [f"{PAD}{kind:<11} {fields}".rstrip()]


def fmt_bytes(n: int) -> str:
    """A byte count for people: 321 B, 4.0 KiB, 1.5 MiB."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _command(value: Any) -> str:
    return cut((" ".join(str(v) for v in value) if isinstance(value, list) else str(value or "")).replace("\n", "⏎ "),
               VERBOSE_LIMIT)


def show(selector: str | None, workdir: Path, verbose: bool = False) -> dict[str, Any]:
    """Resolve a session address and build its steps (E-TRC-001/002, E-IO-*)."""
    from mur.trace.sessions import resolve_trace
    from mur.trace.reader import load_events

    path = resolve_trace(selector, workdir)
    steps = build_steps(load_events(path), str(path), verbose)
    steps["trace"] = str(path)
    return steps
