"""An agent task's stream frames (`message/stream`, `stream/watch`), as upstream emits them.

The agent loop tells a :class:`TaskStream` what happens (mur.inference.loop's ``events``); the
driver's and tools' ``murmur:text/chunks`` calls reach :meth:`TaskStream.on_chunk`. Frames go out
through the task's A2A context (mur.a2a.lifecycle), in upstream's order:

* ``status`` working, ``inference turn N``, before each model call;
* ``text`` ``{"text": chunk, "final": false}`` per ``emit-chunk`` (``thinking`` per
  ``emit-thinking-chunk``) while the driver runs; once it returns, after a turn that streamed, one
  ``text`` ``{"text": "", "final": true}`` (the cursor-removal signal);
* ``artifact`` ``{"tool_name", "content"}`` after every tool call, failed ones included (content past
  ARTIFACT_LIMIT bytes is cut, with a note: every frame stays in the replay buffer, and the model
  chooses how many calls there are);
* at the end, when no chunk was streamed in the last turn, one ``text`` with the whole answer and
  ``"final": true`` (the non-streaming driver's fallback), before the service's final ``status``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mur.a2a.lifecycle import TaskContext

ARTIFACT_LIMIT = 64 * 1024  # bytes of a tool result a stream frame carries


class TaskStream:
    """Frames of one task, published through `context.emit` (a mur.a2a.lifecycle TaskContext)."""

    def __init__(self, context: TaskContext):
        self.context = context
        self.streamed = False  # emit-chunk was called since the current turn began

    def _emit(self, event: str, data: dict) -> None:
        emit = getattr(self.context, "emit", None)
        if emit is not None:
            emit(event, data)

    def on_chunk(self, kind: str, text: str) -> None:
        """`murmur:text/chunks` from the driver or a tool: kind "text" or "thinking"."""
        if kind == "text":
            self.streamed = True
        self._emit(kind, {"text": text, "final": False})

    def turn_started(self, turn: int) -> None:
        self.streamed = False
        self._emit("status", {"state": "working", "message": f"inference turn {turn + 1}"})

    def replied(self, turn: int) -> None:
        if self.streamed:
            self._emit("text", {"text": "", "final": True})

    def tool_result(self, name: str, content: str, is_error: bool) -> None:
        raw = content.encode("utf-8", "replace")
        if len(raw) > ARTIFACT_LIMIT:
            kept = raw[:ARTIFACT_LIMIT].decode("utf-8", "ignore")
            content = f"{kept}\n[cut: {len(raw)} bytes in all; the model got the whole result]"
        self._emit("artifact", {"tool_name": name, "content": content})

    def finished(self, text: str) -> None:
        if not self.streamed and text:
            self._emit("text", {"text": text, "final": True})
