"""`mur trace steps`: a session turn by turn (upstream cli.md "mur trace steps").

The trace (upstream.md 3.3) is cut into attempts, one per `session_start`..`session_end` pair, each
under the task (`task_start`) it ran for. Inside an attempt every turn-level event is filed under its
`turn`: the agent loop's `inference` line is the turn itself (decision, tool asked for, tokens); the
`tool_call`, `skill_call`, `shell` and `compaction` lines, a hook's `run-inference` (`origin`), and
any unknown event type carrying a `turn` are listed under it in file order. `--verbose` adds what a
call was given: tool inputs, tool outputs (present only under `trace.include_tool_output`) and shell
commands. The trace must parse and hold a session_start and a session_end (E-TRC-001, as
`mur trace show`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mur.humanize import plain
from mur.trace import events as ev, failures
from mur.trace.timeline import as_int, fmt_input, fmt_ms, require_session

VERBOSE_LIMIT = 120
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
        attempt["turns"] = [attempt["turns"][n] for n in sorted(attempt["turns"])]
    starts = [e for e in events if e["event_type"] == ev.SESSION_START]
    ends = [e for e in events if e["event_type"] == ev.SESSION_END]
    tasks = {a["task_id"] for a in attempts if a["task_id"] is not None}
    return {
        "session_id": _text(starts[0].get("session_id")),
        "status": _text(ends[-1].get("exit_status")),
        "turns": as_int(ends[-1].get("total_turns")),
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
        "turn": number, "decision": None, "tool_name": None, "input_tokens": 0, "output_tokens": 0, "events": []})
    kind = event["event_type"]
    if kind == ev.INFERENCE and not event.get("origin") and turn["decision"] is None:
        turn.update(decision=_text(event.get("decision")) or "—", tool_name=_text(event.get("tool_name")),
                    input_tokens=as_int(event.get("input_tokens")), output_tokens=as_int(event.get("output_tokens")))
        return
    turn["events"].append(_step(event, verbose))


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
    """The human form: a header, then per task/attempt its turns and their calls."""
    s = steps
    counts = [f"{s['tasks']} task{'s' if s['tasks'] != 1 else ''}"] if s["tasks"] else []
    counts.append(f"{s['turns']} turn{'s' if s['turns'] != 1 else ''}")
    duration = sum(as_int(a["duration_ms"]) for a in s["attempts"])
    out = [f"Session {s['session_id']}  ({', '.join(counts)})  {s['status'] or '—'}  {fmt_ms(duration)}"]
    attempts = s["attempts"]
    seen: dict[str | None, int] = {}
    for attempt in attempts:
        out.append("")
        n = seen[attempt["task_id"]] = seen.get(attempt["task_id"], 0) + 1
        if attempt["task_id"] is not None:
            again = f"  attempt {n}" if n > 1 else ""
            out.append(f"task {attempt['task_id']}  ({attempt['source'] or '—'}){again}")
        elif len(attempts) > 1:
            out.append(f"attempt {n}")
        if not attempt["turns"]:
            out.append("  (no turns)")
        for turn in attempt["turns"]:
            out.extend(_turn_lines(turn))
        agent_turns = sum(1 for t in attempt["turns"] if t["decision"] is not None)
        if attempt["status"] is None:
            out.append("  end  —  (no session_end)")
        else:
            out.append(f"  end  {attempt['status']}  {agent_turns} turn{'s' if agent_turns != 1 else ''}  "
                       f"{fmt_ms(attempt['duration_ms'])}")
    return "\n".join(out) + "\n"


def _turn_lines(turn: dict[str, Any]) -> list[str]:
    decision = turn["decision"] or "—"
    if turn["tool_name"]:
        decision += f" → {turn['tool_name']}"
    head = f"  turn {turn['turn']}  {decision}"
    if turn["decision"] is not None:
        head += f"  in {turn['input_tokens']:,}  out {turn['output_tokens']:,}"
    lines = [head]
    previous: dict[str, Any] = {}
    for row in turn["events"]:
        if row["kind"] == ev.SHELL and previous.get("error"):  # its tool_call line said why already
            row = {**row, "meaning": None}
        lines.extend(_row_lines(row))
        previous = row
    return lines


def _row_lines(row: dict[str, Any]) -> list[str]:
    kind, pad = row["kind"], "      "
    if kind == ev.TOOL_CALL:
        mark = "✓" if row["status"] == "ok" else "✗"
        effect = f"  {row['state_effect']}" if row.get("state_effect") else ""
        lines = [f"    tool_call   {plain(row['name'])}  {mark} {plain(row['status'])}  {fmt_ms(row['duration_ms'])}  "
                 f"in {fmt_bytes(row['input_bytes'])}  out {fmt_bytes(row['output_bytes'])}{effect}"]
        lines.extend(_failure_lines(row, pad))
        if "input" in row:
            lines.append(f"{pad}input:  " + (fmt_input(row["input"], VERBOSE_LIMIT).strip() or "—"))
        if "output" in row:
            lines.append(f"{pad}output: " + (fmt_input(row["output"], VERBOSE_LIMIT).strip() or "—"))
        return lines
    if kind == ev.SKILL_CALL:
        mark = "✓" if row["status"] == "ok" else "✗"
        return [f"    skill_call  {plain(row['name'])}  {mark} {plain(row['status'])}  {fmt_ms(row['duration_ms'])}  "
                f"out {fmt_bytes(row['output_bytes'])}"]
    if kind == ev.SHELL:
        limit = f"  limit {row['resource_limit']}" if row.get("resource_limit") else ""
        lines = [f"    shell       {plain(row['binary'] or None)}  exit {plain(row['exit_code'])}  {fmt_ms(row['duration_ms'])}  "
                 f"stdout {fmt_bytes(row['stdout_bytes'])}  stderr {fmt_bytes(row['stderr_bytes'])}{limit}"]
        lines.extend(_failure_lines(row, pad))
        if "command" in row:
            lines.append(f"{pad}$ {row['command']}")
        return lines
    if kind == ev.COMPACTION:
        return [f"    compaction  {row['tokens_before']:,} → {row['tokens_after']:,} tokens"]
    if kind == ev.INFERENCE:
        decision = (row["decision"] or "—") + (f" → {row['tool_name']}" if row["tool_name"] else "")
        origin = f"  ({row['origin']})" if row["origin"] else ""
        return [f"    inference   {decision}  in {row['input_tokens']:,}  out {row['output_tokens']:,}{origin}"]
    fields = "  ".join(f"{k}={plain(v)}" for k, v in row["fields"].items() if v is not None)
    return [f"    {kind:<11} {fields}".rstrip()]


def fmt_bytes(n: int) -> str:
    """A byte count for people: 321 B, 4.0 KiB, 1.5 MiB."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _command(value: Any) -> str:
    text = " ".join(str(v) for v in value) if isinstance(value, list) else str(value or "")
    text = text.replace("\n", "⏎ ")
    return text if len(text) <= VERBOSE_LIMIT else text[: VERBOSE_LIMIT - 1] + "…"


def _text(value: Any) -> str | None:
    """A trace field as a string (None stays None): a malformed field never breaks rendering."""
    if value is None or isinstance(value, str):
        return value
    return str(value)


def show(selector: str | None, workdir: Path, verbose: bool = False) -> dict[str, Any]:
    """Resolve a session address and build its steps (E-TRC-001/002, E-IO-*)."""
    from mur.trace.sessions import resolve_trace
    from mur.trace.reader import load_events

    path = resolve_trace(selector, workdir)
    steps = build_steps(load_events(path), str(path), verbose)
    steps["trace"] = str(path)
    return steps
