"""`mur trace show`'s text: upstream's sections and lines (scripts read them), then mur's additions.

Upstream's order and wording: Session, Turns, Tokens, Tool calls (one line per turn: its calls, or
the turn's decision when it made none), Redundant calls, Skill calls, Shell calls, Compaction,
Reopens (when a hook reopened a task), Tasks (when more than one task ran). mur adds the launch
facts to Session (capabilities, tools, containment, prompt), a Hook failures section, why each failed
call failed (`error:` under its turn, an exit status's meaning and stderr tail under Shell calls),
every compaction rather than the last, and a Timeline of every event at the end.
"""

from __future__ import annotations

from typing import Any, Callable

from mur.humanize import plain
from mur.trace.fmt import as_int, field, fmt_avg, fmt_exit_codes, fmt_input, fmt_ms, heading, one_line
from mur.trace.timeline import render_rows

REASON_LIMIT = 80  # a reopen's reason, as upstream


def render(s: dict[str, Any]) -> str:
    """The human report of one `mur.trace.summary.summarize` result."""
    out: list[str] = []
    section = _section(out)
    section("Session")
    prompt = s["prompt"]
    digest = f"  {prompt['sha256'][:12]}…" if prompt["sha256"] else ""
    out += [
        field("session", plain(s["session_id"])),
        field("capsule", f"{plain(s['capsule'])} v{plain(s['version'])}"),
        field("model", plain(s["model"])),
        field("status", plain(s["status"])),
        field("duration", fmt_ms(s["duration_ms"])),
        field("capabilities", plain(s["capabilities"])),
        field("tools", plain(s["tools"])),
        field("containment", f"{plain(s['containment']['declared'])} → {plain(s['containment']['achieved'])}"),
        field("workdir exec", plain(bool(s["workdir_exec"]))),
        field("prompt", f"{prompt['source'] or 'none'}{digest}"),
    ]
    if s["hook_failures"]:
        section("Hook failures")
        out.extend(f"✗ {h['hook_name']} {h['event']} {h['arm']}" for h in s["hook_failures"])
    section("Turns")
    out.append(field("count", f"{s['turns']['count']}  (max: {plain(s['turns']['max'])})"))
    section("Tokens")
    tok = s["tokens"]
    out.append(field("input", f"{tok['input']:,}  (avg {fmt_avg(tok['avg_input_per_turn'])}/turn)"))
    out.append(field("output", f"{tok['output']:,}  (avg {fmt_avg(tok['avg_output_per_turn'])}/turn)"))
    out.append(field("total", f"{tok['total']:,}"))
    section("Tool calls")
    tc = s["tool_calls"]
    out.append(_count_line(tc))
    if tc["count"]:
        out.append(field("latency", f"avg {fmt_ms(tc['avg_ms'])}"))
        out.extend(_turn_lines(tc["calls"], s["turns"]["decisions"], _tool_part, with_errors=True))
    section("Redundant calls")
    out.append(field("count", len(s["redundant_calls"])))
    out.extend(f"  turn {r['turn']}  {r['tool_name']}  {one_line(r['resource'])}  (re-reads turn {r['prior_turn']})"
               for r in s["redundant_calls"])
    section("Skill calls")
    kc = s["skill_calls"]
    out.append(_count_line(kc))
    if kc["count"]:
        out.append(field("latency", f"avg {fmt_ms(kc['avg_ms'])}"))
        out.extend(_turn_lines(kc["calls"], [], _skill_part))
    section("Shell calls")
    sc = s["shell_calls"]
    out.append(field("count", sc["count"]))
    if sc["count"]:
        out.append(field("exit codes", fmt_exit_codes({as_int(k): n for k, n in sc["exit_codes"].items()})))
        out.append(field("latency", f"avg {fmt_ms(sc['avg_ms'])}"))
    for f in sc["failures"]:
        meaning = f": {f['meaning']}" if f.get("meaning") else ""
        out.append(f"  turn {plain(f['turn'])}  {plain(f['binary'])}  exit {f['exit_code']}{meaning}")
        out.extend(f"      {line}" for line in (f.get("stderr_tail") or "").split("\n") if f.get("stderr_tail"))
    section("Compaction")
    if not s["compaction"]:
        out.append(field("fired", "no"))
    for c in s["compaction"]:
        out.append(field("fired", f"yes  at turn {plain(c['turn'])}  "
                                  f"({as_int(c['tokens_before']):,} → {as_int(c['tokens_after']):,} tokens)"))
    if s["reopens"]:
        section("Reopens")
        out.extend(f"reopen {plain(r['reopen_number'])}  by {plain(r['hook_name'])}  "
                   f"“{one_line(str(r['reason'] or '')[:REASON_LIMIT])}”" for r in s["reopens"])
    if len(s["tasks"]) > 1:
        section("Tasks")
        out.extend(task_line(i, t) for i, t in enumerate(s["tasks"], start=1))
    section("Timeline")
    out.extend(render_rows(s["timeline"]))
    return "\n".join(out) + "\n"


def task_line(number: int, t: dict[str, Any]) -> str:
    """`task 2  tsk_01a22aca  turns: 4  in: 1,200  out: 80  ok  1.2s[  reopens: 1]` (upstream's)."""
    reopens = as_int(t.get("reopen_count"))
    return (f"task {number}  {str(t.get('task_id') or '')[:12]}  turns: {as_int(t.get('turns'))}  "
            f"in: {as_int(t.get('input_tokens')):,}  out: {as_int(t.get('output_tokens')):,}  "
            f"{plain(t.get('exit_status'))}  {fmt_ms(t.get('duration_ms'))}"
            + (f"  reopens: {reopens}" if reopens else ""))


def _count_line(calls: dict[str, Any]) -> str:
    if not calls["count"]:
        return field("count", 0)
    return field("count", f"{calls['count']}  ({calls['ok']} ok, {calls['error']} error)  "
                          f"success {calls['success_pct']:.1f}%")


def _tool_part(call: dict[str, Any]) -> str:
    return f"{plain(call['tool_name'])} {fmt_ms(call['duration_ms'])} {_mark(call)}{fmt_input(call['input'])}"


def _skill_part(call: dict[str, Any]) -> str:
    return f"{plain(call['skill_name'])} {fmt_ms(call['duration_ms'])} {_mark(call)}"


def _mark(call: dict[str, Any]) -> str:
    return "✓" if call["status"] == "ok" else "✗"


def _turn_lines(calls: list[dict[str, Any]], decisions: list[dict[str, Any]], part_text: Callable[[dict], str],
                with_errors: bool = False) -> list[str]:
    """`  turn N  <call>  <call>`, or `  turn N  <decision>` for a turn without calls, turns in order;
    each part (task, attempt) on its own, under `  task N` when there are several."""
    by_turn: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for call in calls:
        by_turn.setdefault((call["part"], call["turn"]), []).append(call)
    decided = {(d["part"], d["turn"]): d["decision"] for d in decisions}
    parts = sorted({key[0] for key in by_turn} | {key[0] for key in decided})
    out: list[str] = []
    for n, part in enumerate(parts, start=1):
        if len(parts) > 1:
            out.append(f"  task {n}")
        for key in sorted(k for k in set(by_turn) | set(decided) if k[0] == part):
            made = by_turn.get(key)
            if made is None:
                out.append(f"  turn {key[1]}  {plain(decided[key])}")
                continue
            out.append(f"  turn {key[1]}  " + "  ".join(part_text(c) for c in made))
            if with_errors:
                out.extend(f"      error: {plain(c['tool_name']) + ': ' if len(made) > 1 else ''}{c['error']}"
                           for c in made if c.get("error"))
    return out


def _section(out: list[str]) -> Callable[[str], None]:
    def add(title: str) -> None:
        if out:
            out.append("")
        out.append(heading(title))

    return add

