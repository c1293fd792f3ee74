"""How ``mur watch`` shows a capsule's stream (upstream ``commands/watch.rs``).

* ``status`` (not final): ``[working]  inference turn 2``
* ``status`` (final): ``[completed]`` then the response wrapped and indented by two spaces;
  ``[failed]  <message>`` / ``[rejected]  <message>`` / ``[canceled]  <message>``
* ``artifact``: ``[artifact] tool: <name> | <first line>`` then further lines indented
* ``text``: the chunk as is (no newline); ``thinking`` is not shown
* ``gap`` / ``lagged`` / ``capsule-closed``: notes on stderr
* threaded capsules (``connection-ack`` says so) prefix status lines with
  ``[ctx_1234abcd... / turn N / state]``.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

WIDTH = 80


@dataclass
class Rendered:
    stdout: str = ""
    stderr: list[str] = field(default_factory=list)


def short_context(context_id: str) -> str:
    """``ctx_`` + the first 8 hex digits + ``...``."""
    if context_id.startswith("ctx_"):
        return f"ctx_{context_id[4:12]}..."
    return f"{context_id[:12]}..."


def _wrap(text: str) -> str:
    lines = []
    for paragraph in text.splitlines():
        if not paragraph.strip():
            lines.append("")
            continue
        lines.extend(textwrap.wrap(paragraph, WIDTH - 2, break_long_words=False, break_on_hyphens=False))
    return "".join(f"  {line}\n" if line else "\n" for line in lines)


class WatchRenderer:
    """Turns SSE events into terminal text; keeps the little state threaded mode needs."""

    def __init__(self) -> None:
        self.conversation_mode = "stateless"
        self._task_context: dict[str, str] = {}
        self._turns: dict[str, int] = {}
        self._mid_line = False

    def render(self, event: str, data: object) -> Rendered:
        out = Rendered()
        if not isinstance(data, dict):
            return out
        if event == "connection-ack":
            self.conversation_mode = str(data.get("conversation_mode", "stateless"))
        elif event == "gap":
            out.stderr.append(
                "[murmur] warning: buffer overflow — some earlier events were lost "
                f"(first available id: {data.get('first_available_id')})"
            )
        elif event == "lagged":
            out.stderr.append("[murmur] warning: this watcher fell behind the stream; reconnecting")
        elif event == "capsule-closed":
            out.stderr.append("[murmur] capsule closed")
        elif event == "status":
            out.stdout = self._status(data)
        elif event == "artifact":
            out.stdout = self._artifact(data)
        elif event == "text":
            text = data.get("text")
            if isinstance(text, str) and text:
                out.stdout = text
                self._mid_line = not text.endswith("\n")
            return out
        if out.stdout and self._mid_line:
            out.stdout = "\n" + out.stdout
            self._mid_line = False
        return out

    def _status(self, data: dict) -> str:
        task_id = str(data.get("id", ""))
        status = data.get("status") if isinstance(data.get("status"), dict) else {}
        state = str(status.get("state", "unknown"))
        message = str(status.get("message", "") or "")
        response = status.get("response")
        final = data.get("final") is True
        context_id = data.get("context_id")
        if isinstance(context_id, str):
            self._task_context[task_id] = context_id
        if self.conversation_mode == "threaded":
            cid = self._task_context.get(task_id, task_id)
            turn = self._turns.setdefault(cid, 1)
            label = f"[{short_context(cid)} / turn {turn} / {state}]"
            if final:
                self._turns[cid] = turn + 1
        else:
            label = f"[{state}]"
        if not final:
            return f"{label}  {message}\n"
        if state == "completed":
            body = _wrap(response) + "\n" if isinstance(response, str) and response else ""
            return f"{label}\n{body}"
        return f"{label}  {message}\n" if message else f"{label}\n"

    def _artifact(self, data: dict) -> str:
        artifact = data.get("artifact") if isinstance(data.get("artifact"), dict) else {}
        name = artifact.get("tool_name", "unknown")
        content = artifact.get("content", "")
        lines = str(content).splitlines()
        if not lines:
            return f"[artifact] tool: {name}\n"
        return f"[artifact] tool: {name} | {lines[0]}\n" + "".join(f"  {line}\n" for line in lines[1:])
