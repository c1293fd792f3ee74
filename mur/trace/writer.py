"""`trace.jsonl`: one JSON object per line, appended as events happen (reference/upstream.md 3.3).

Every line carries `event_type`, `session_id` and `timestamp` (Unix ms). Lines are written with a
single `write()` on an O_APPEND descriptor and flushed, so a reader (or a crash) never sees half a
line. A failed write ends the session with E-RUN-007, except for `compaction` events, which are
logged to logs/bootstrap.log instead (upstream's rule). Listeners (OTel export, hooks) get every event.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from mur.errors import MurError
from mur.fsafe import append_text, open_append
from mur.trace import events as ev

Listener = Callable[[dict[str, Any]], None]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class TraceWriter:
    """Appends events to `<session workdir>/trace.jsonl`."""

    def __init__(self, path: Path, session_id: str, bootstrap_log: Path | None = None):
        self.path = Path(path)
        self.session_id = session_id
        self.bootstrap_log = bootstrap_log
        self.listeners: list[Listener] = []
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = open_append(self.path)  # never through a link

    def emit(self, event_type: str, **fields: Any) -> dict[str, Any]:
        """Write one event; returns the full record."""
        record = {"event_type": event_type, "session_id": self.session_id, "timestamp": now_ms()}
        record.update(fields)
        self.write(record)
        return record

    def write(self, event: dict[str, Any]) -> None:
        """Write a prepared event dict (session_id/timestamp are filled in when missing)."""
        record = dict(event)
        record.setdefault("session_id", self.session_id)
        record.setdefault("timestamp", now_ms())
        line = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        with self._lock:
            try:
                if self._fd < 0:
                    raise OSError("trace writer is closed")
                os.write(self._fd, line)
            except OSError as exc:
                if record.get("event_type") == ev.COMPACTION:
                    self._bootstrap(f"failed to write compaction event to trace.jsonl: {exc}")
                else:
                    raise MurError("E-RUN-007", f"agent loop failed: could not write trace.jsonl: {exc}") from exc
        for listener in list(self.listeners):
            try:
                listener(record)
            except Exception as exc:  # noqa: BLE001 - a listener must never break the session
                self._bootstrap(f"trace listener failed: {exc}")

    def _bootstrap(self, message: str) -> None:
        if self.bootstrap_log is None:
            return
        try:
            append_text(self.bootstrap_log, message + "\n")
        except OSError:
            pass

    def flush(self) -> None:
        """fsync what was written (lines are already written unbuffered; this makes them durable)."""
        with self._lock:
            if self._fd >= 0:
                try:
                    os.fsync(self._fd)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

