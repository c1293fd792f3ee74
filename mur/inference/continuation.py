"""Driver continuation (upstream's stateful-driver protocol): send only what the driver has not seen.

A driver may return ``("continuation_id", <id>)`` in ``tool-result.metadata``: it keeps the
conversation it was sent and the host may send only the messages appended since, with the id as
``continuation_id`` in the next wire payload. Silence (no key, or an empty value) ends it: the next
turn is a full resend without the key.

One :class:`Continuation` lives for a session (held by mur.session.executor) and is scoped to the
A2A context it was established in, so a threaded conversation's next task continues it too. It
remembers how many wire messages the driver acknowledged and a digest of them: when the prefix it
would skip is no longer what the driver saw (a compaction replaced the context, another context's
task), the payload is sent in full without the key. Token accounting never sees the difference:
callers estimate from the full payload (upstream's rule).
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

KEY = "continuation_id"


def _digest(messages: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class Continuation:
    """The continuation a driver holds, for one context at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.context_id: str | None = None
        self.id: str | None = None
        self.acked = 0  # wire messages the driver has seen
        self._seen = ""  # digest of those messages

    def wire(self, payload: dict[str, Any], context_id: str | None) -> dict[str, Any]:
        """The payload to transmit: `payload` itself, or its unseen tail plus ``continuation_id``."""
        messages = payload.get("messages") or []
        with self._lock:
            held = (self.id is not None and self.context_id == context_id and self.acked <= len(messages)
                    and _digest(messages[: self.acked]) == self._seen)
            if not held:
                return payload
            return {**payload, "messages": messages[self.acked:], KEY: self.id}

    def record(self, reply_id: str | None, sent: list[dict[str, Any]], context_id: str | None) -> None:
        """After a reply to a payload whose full messages were `sent`: hold `reply_id` (the driver
        now knows `sent`), or drop the continuation when the driver returned none."""
        with self._lock:
            if not reply_id:
                self.context_id, self.id, self.acked, self._seen = None, None, 0, ""
                return
            self.context_id, self.id = context_id, reply_id
            self.acked, self._seen = len(sent), _digest(sent)

    def advance(self, history: list[dict[str, Any]], context_id: str | None) -> None:
        """A task of `context_id` ended with `history` (wire messages): the driver generated its last
        message, so the next task of this context need not resend it."""
        with self._lock:
            if self.id is None or self.context_id != context_id or self.acked > len(history):
                return
            if _digest(history[: self.acked]) == self._seen:
                self.acked, self._seen = len(history), _digest(history)
