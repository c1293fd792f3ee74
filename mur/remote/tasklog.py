"""`mur deploy logs`: the service log with one line per task, read from the sessions' traces.

A deployed runtime prints its startup line and, when it ends, its ending line; what it did in
between is in each session's trace.jsonl on the target (`task_start` / `task_end`, and the
`tool_call`s in between). So `logs` reads the deployment's sessions where they run
(mur.remote.sessions: read-only, SFTP for an SSH host) and puts a line per task start and end
right after the startup line of the session that ran it (the runtime prints nothing else while
it serves, and the supervisor's and systemd's lines come before a start or after an exit):

    {"url": "http://127.0.0.1:8080", "pid": 17, "session_id": "ses_0196…", ...}
    [mur task 2025-06-01T10:00:03Z] tsk_0196… started (a2a) in ses_0196…
    [mur task 2025-06-01T10:00:05Z] tsk_0196… failed 2.1s, 3 turns, 2 tool calls (1 failed): …

With `-f` the log is followed as before and the newest traces are polled for new task events.
Only the tail of each trace is read for history (TAIL_BYTES); a line that does not parse is
skipped (a trace being written ends in a partial line): logs never fail over a trace.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from mur.remote.sessions import SessionRef, Sessions
from mur.trace import events as ev

TAIL_BYTES = 2 << 20  # of each trace, for the history `logs` shows
POLL_SECS = 1.0
ERROR_CHARS = 300


@dataclass
class TaskLine:
    text: str
    record: dict[str, Any]


def _stamp(ms: Any) -> str:
    try:
        t = datetime.fromtimestamp(int(ms) / 1000, tz=timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return 0


def _secs(ms: Any) -> str:
    return f"{_int(ms) / 1000:.1f}s"


def _one_line(text: Any) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= ERROR_CHARS else flat[: ERROR_CHARS - 1] + "…"


@dataclass
class TaskReader:
    """Turns one session's trace events into task lines, in order; keeps what spans two reads."""

    session_id: str
    failed_tools: dict[str, int] = field(default_factory=dict)
    current: str | None = None

    def feed(self, event: dict[str, Any]) -> TaskLine | None:
        kind = event.get("event_type")
        if kind == ev.TASK_START:
            self.current = str(event.get("task_id") or "?")
            self.failed_tools[self.current] = 0
            record = {"session_id": self.session_id, "task_id": self.current, "event": "start",
                      "time": _stamp(event.get("timestamp")), "source": event.get("source")}
            return TaskLine(f"[mur task {record['time']}] {self.current} started ({record['source'] or '?'}) "
                            f"in {self.session_id}", record)
        if kind == ev.TOOL_CALL and event.get("status") != "ok" and self.current is not None:
            self.failed_tools[self.current] = self.failed_tools.get(self.current, 0) + 1
            return None
        if kind != ev.TASK_END:
            return None
        task = str(event.get("task_id") or "?")
        failed = self.failed_tools.pop(task, 0)
        self.current = None if self.current == task else self.current
        record = {"session_id": self.session_id, "task_id": task, "event": "end",
                  "time": _stamp(event.get("timestamp")), "status": event.get("exit_status"),
                  "duration_ms": _int(event.get("duration_ms")), "turns": _int(event.get("turns")),
                  "tool_calls": _int(event.get("tool_calls")), "failed_tool_calls": failed,
                  "input_tokens": _int(event.get("input_tokens")), "output_tokens": _int(event.get("output_tokens"))}
        calls = record["tool_calls"]
        parts = [f"{record['status'] or '?'} {_secs(record['duration_ms'])}", f"{record['turns']} turns",
                 f"{calls} tool call{'s' if calls != 1 else ''}" + (f" ({failed} failed)" if failed else "")]
        text = f"[mur task {record['time']}] {task} " + ", ".join(parts)
        if event.get("error"):
            record["error"] = _one_line(event["error"])
            text += f": {record['error']}"
        return TaskLine(text, record)


def parse_chunk(data: bytes, complete_only: bool) -> tuple[list[dict[str, Any]], int]:
    """(events, bytes consumed) of a piece of trace: whole lines only when `complete_only`; a line
    that is not a JSON object is skipped."""
    end = data.rfind(b"\n") + 1 if complete_only else len(data)
    out = []
    for raw in data[:end].split(b"\n"):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            continue
        if isinstance(event, dict):
            out.append(event)
    return out, end


def history(sessions: Sessions, refs: list[SessionRef], tail: int = TAIL_BYTES
            ) -> tuple[dict[str, list[TaskLine]], dict[str, int]]:
    """(task lines per session id, bytes of each trace read so far) from the tail of each trace."""
    lines: dict[str, list[TaskLine]] = {}
    offsets: dict[str, int] = {}
    for ref in refs:
        size = sessions.size(ref)
        start = max(0, size - tail)
        data = sessions.read(ref, start, size - start)
        if start > 0:  # the first line is cut: begin after it
            data = data[data.find(b"\n") + 1:] if b"\n" in data else b""
            start = size - len(data)
        events, used = parse_chunk(data, complete_only=True)
        offsets[ref.session_id] = start + used
        reader = TaskReader(ref.session_id)
        lines[ref.session_id] = [t for t in map(reader.feed, events) if t is not None]
    return lines, offsets


def _startup_session(line: str) -> str | None:
    """The session id of the runtime's startup JSON line (it carries `url`), else None."""
    text = line.strip()
    if not text.startswith("{") or '"url"' not in text:
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    sid = obj.get("session_id") if isinstance(obj, dict) and "url" in obj else None
    return sid.lower() if isinstance(sid, str) else None


class Merger:
    """Puts each session's task lines right after that session's startup line in the service log."""

    def __init__(self, tasks: dict[str, list[TaskLine]], emit: Callable[[str, dict[str, Any] | None], None]):
        self.pending = dict(tasks)
        self.anchored: list[str] = []
        self.emit = emit

    def line(self, text: str) -> None:
        self.emit(text, None)
        sid = _startup_session(text)
        if sid is not None:
            self.anchored.append(sid)
            for t in self.pending.pop(sid, []):
                self.emit(t.text, t.record)

    def unanchored(self, newer_than_last: bool | None) -> list[TaskLine]:
        """Task lines of sessions whose startup line is not in the log window: those older than the
        last anchored session (`newer_than_last` False), newer (True), or all (None); removed."""
        last = max(self.anchored) if self.anchored else ""
        picked = sorted(sid for sid in self.pending
                        if newer_than_last is None or (sid > last) == newer_than_last)
        return [t for sid in picked for t in self.pending.pop(sid)]


def merged(service: str, tasks: dict[str, list[TaskLine]], lines: int) -> list[TaskLine]:
    """The last `lines` lines of the service log with the task lines in place (records for tasks)."""
    body: list[TaskLine] = []
    merger = Merger(tasks, lambda text, record: body.append(TaskLine(text, record or {})))
    for text in service.splitlines():
        merger.line(text)
    out = merger.unanchored(False) + body + merger.unanchored(True)
    return out[-lines:] if lines > 0 else []


class Follower:
    """Polls the deployment's traces for task events written after `offsets` (new sessions from 0)."""

    def __init__(self, sessions: Sessions, offsets: dict[str, int], emit: Callable[[TaskLine], None],
                 poll: float = POLL_SECS):
        self.sessions, self.offsets, self.emit, self.poll = sessions, dict(offsets), emit, poll
        self.readers: dict[str, TaskReader] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def step(self) -> None:
        for ref in self.sessions.list():
            done = self.offsets.get(ref.session_id, 0)
            size = self.sessions.size(ref)
            if size <= done:
                continue
            data = self.sessions.read(ref, done, size - done)
            events, used = parse_chunk(data, complete_only=True)
            self.offsets[ref.session_id] = done + used
            reader = self.readers.setdefault(ref.session_id, TaskReader(ref.session_id))
            for event in events:
                line = reader.feed(event)
                if line is not None:
                    self.emit(line)

    def run(self) -> None:
        from mur.remote.traces import remote_errors

        while not self.stop.wait(self.poll):
            try:
                self.step()
            except remote_errors() as exc:  # the connection went away: the log stream says so too
                self.error = exc
                return

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name="mur-task-follower", daemon=True)
        thread.start()
        return thread


class LineSink:
    """Bytes from the log stream and task lines from the follower, written whole lines at a time."""

    def __init__(self, write: Callable[[str, dict[str, Any] | None], None], merger: Merger | None = None):
        self.write, self.merger = write, merger
        self.lock = threading.Lock()
        self.pending = bytearray()

    def data(self, chunk: bytes) -> None:
        with self.lock:
            self.pending.extend(chunk)
            *done, rest = bytes(self.pending).split(b"\n")
            self.pending[:] = rest
            for raw in done:
                text = raw.decode("utf-8", "replace")
                if self.merger is not None:
                    self.merger.line(text)
                else:
                    self.write(text, None)

    def task(self, line: TaskLine) -> None:
        with self.lock:
            self.write(line.text, line.record)

    def flush(self) -> None:
        with self.lock:
            if self.pending:
                self.write(self.pending.decode("utf-8", "replace"), None)
                self.pending.clear()

