"""Why a tool call failed, as the trace tells it (the writer's fields, and what the views show).

The writer (mur.session.tools) records on a failed `tool_call` an `error`: mur's own words for the
failure (`unknown tool 'x'`, `shell capability not granted`, a sandbox refusal, `exit code 126:
...`), never the tool's output; and on a `shell` event that exited non-zero, its `stderr_tail`
(the last STDERR_LINES lines, at most STDERR_CHARS) only when `trace.include_tool_output` is on,
because stderr is the tool's output. The views (`mur trace show`, `mur trace steps`) show both;
for a trace written before these fields they fall back on the `output` field (present only under
include_tool_output) and on the exit code's conventional meaning.
"""

from __future__ import annotations

import json
import signal
from typing import Any

STDERR_LINES = 10
STDERR_CHARS = 1000
REASON_CHARS = 300
STDERR_MARK = "\n[stderr]\n"  # how a shell tool's result joins stdout and stderr (mur.session.tools)


def exit_meaning(code: Any) -> str | None:
    """What a shell exit status conventionally says (POSIX sh: 126, 127; 128+N: signal N)."""
    try:
        code = int(code)
    except (TypeError, ValueError, OverflowError):
        return None
    if code == 126:
        return "found but not executed (permission denied: not executable, or exec refused there)"
    if code == 127:
        return "command not found"
    if 128 < code < 128 + 65:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return f"killed by {name}"
    return None


def shell_reason(exit_code: int, summary: str, timed_out: bool = False) -> str:
    """The `error` of a failed shell tool call: its summary (`exit code N`, a limit) and what it means."""
    meaning = "timed out and was killed" if timed_out else exit_meaning(exit_code)
    return f"{summary}: {meaning}" if meaning and meaning not in summary else summary


def tail(text: str, lines: int = STDERR_LINES, chars: int = STDERR_CHARS) -> str:
    """The last `lines` lines of `text`, at most `chars` characters (cut at the front with `…`)."""
    kept = "\n".join(text.rstrip("\n").split("\n")[-lines:])
    return kept if len(kept) <= chars else "…" + kept[-(chars - 1):]


def short(text: Any, limit: int = REASON_CHARS) -> str:
    """A reason on one line, cut to `limit` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _output_body(output: Any) -> dict[str, Any] | None:
    if isinstance(output, str):
        try:
            output = json.loads(output)
        except ValueError:
            return None
    return output if isinstance(output, dict) else None


def tool_error(event: dict[str, Any]) -> str | None:
    """Why a failed `tool_call` failed: its `error`, else the summary its traced `output` carries."""
    if event.get("status") == "ok":
        return None
    if isinstance(event.get("error"), str) and event["error"]:
        return short(event["error"])
    body = _output_body(event.get("output"))
    if body is not None and body.get("summary"):
        return short(body["summary"])
    return None


def output_stderr(event: dict[str, Any]) -> str | None:
    """The stderr tail inside a failed shell tool call's traced `output` (older traces)."""
    body = _output_body(event.get("output"))
    data = body.get("data") if body is not None else None
    if not isinstance(data, str) or STDERR_MARK not in data:
        return None
    return tail(data.rsplit(STDERR_MARK, 1)[1]) or None


def shell_stderr(event: dict[str, Any]) -> str | None:
    """A failed `shell` event's stderr tail (recorded only under include_tool_output)."""
    text = event.get("stderr_tail")
    return text if isinstance(text, str) and text.strip() else None
