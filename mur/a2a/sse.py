"""Server-sent events: numbered frames, a replay buffer, and fan-out to open streams.

Frames are ``id: <n>\\nevent: <type>\\ndata: <json>\\n\\n`` (upstream section 6.1). Every frame the
session publishes gets the next id and enters a bounded ring buffer, so a client that reconnects
with ``Last-Event-ID: n`` gets the frames after ``n``; when some of those were already evicted it
first gets ``event: gap`` with ``{"first_available_id": m}``. Frames written to one connection only
(the ``connection-ack`` of ``stream/watch``, a ``message/stream`` refusal) carry no ``id:`` line.

Publishing happens on any thread (the lifecycle loop, an executor); each subscriber is an
asyncio queue on the server's event loop, fed with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a subscriber exists only once the server (and so asyncio) is running
    import asyncio

from mur.a2a.protocol import dumps

BUFFER_CAPACITY = 1024
# A subscriber that falls this many frames (or bytes) behind is cut off with `event: lagged`; it
# can reconnect with Last-Event-ID and get the replay (or a gap). The byte bound keeps a client
# that never reads from holding more than this much of the server's memory.
SUBSCRIBER_BACKLOG = 10_000
SUBSCRIBER_BACKLOG_BYTES = 8 * 1024 * 1024
HEARTBEAT = ":heartbeat\n\n"


def format_frame(event: str, data: Any, event_id: int | None = None) -> str:
    """One SSE frame; the data line is compact standard JSON (never contains a newline)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = dumps(data)
    return f"{head}event: {event}\ndata: {body}\n\n"


@dataclass(frozen=True)
class Frame:
    """A published frame with what streams filter on."""

    id: int
    text: str
    task_id: str | None
    final_status: bool  # an `event: status` frame with "final": true


# Sentinels queued to a subscriber.
CLOSED = object()  # the session is over: stream/watch writes capsule-closed and ends
LAGGED = object()  # the subscriber fell too far behind: write lagged and end


class Subscriber:
    """One open stream: an asyncio queue on the server loop, bounded in frames and bytes."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        import asyncio

        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self._queued_bytes = 0
        self._cut = False

    def push(self, item: object) -> None:
        try:
            self.loop.call_soon_threadsafe(self._put, item)
        except RuntimeError:  # loop already closed: the connection is gone
            pass

    def _put(self, item: object) -> None:
        if self._cut:
            return
        if isinstance(item, Frame):
            if self.queue.qsize() >= SUBSCRIBER_BACKLOG or self._queued_bytes + len(item.text) > SUBSCRIBER_BACKLOG_BYTES:
                self._cut = True
                item = LAGGED
            else:
                self._queued_bytes += len(item.text)
        self.queue.put_nowait(item)

    async def next(self, timeout: float) -> object:
        """The next queued item; raises asyncio.TimeoutError after ``timeout`` seconds."""
        from mur.aio import wait_for  # not asyncio's: a cancel as a frame is dequeued must end the stream

        item = await wait_for(self.queue.get(), timeout)
        if isinstance(item, Frame):
            self._queued_bytes -= len(item.text)
        return item


@dataclass
class Replay:
    """What a new subscriber gets before live frames: an optional gap and buffered frames."""

    gap: int | None
    frames: list[Frame]


class EventHub:
    """Numbers, buffers and fans out frames. Thread-safe."""

    def __init__(self, capacity: int = BUFFER_CAPACITY):
        self._lock = threading.Lock()
        self._buffer: deque[Frame] = deque(maxlen=capacity)
        self._next_id = 1
        self._subscribers: set[Subscriber] = set()
        self._closed = False

    def publish(self, event: str, data: dict) -> int:
        """Number, buffer and broadcast one frame; returns its id."""
        with self._lock:
            event_id = self._next_id
            self._next_id += 1
            frame = Frame(
                id=event_id,
                text=format_frame(event, data, event_id),
                task_id=data.get("id") if isinstance(data.get("id"), str) else None,
                final_status=event == "status" and data.get("final") is True,
            )
            self._buffer.append(frame)
            for sub in self._subscribers:
                sub.push(frame)
            return event_id

    def subscribe(self, loop: asyncio.AbstractEventLoop, last_event_id: int | None) -> tuple[Subscriber, Replay]:
        """Register a subscriber and, atomically, compute its replay after ``last_event_id``.

        ``last_event_id`` None means no replay. Registration and the buffer snapshot happen under
        one lock, so no frame is both replayed and delivered live, and none is missed.
        """
        sub = Subscriber(loop)
        with self._lock:
            replay = self._replay(last_event_id)
            if self._closed:
                sub.queue.put_nowait(CLOSED)
            else:
                self._subscribers.add(sub)
        return sub, replay

    def _replay(self, last_id: int | None) -> Replay:
        if last_id is None or not self._buffer:
            return Replay(None, [])
        oldest = self._buffer[0].id
        if last_id < oldest - 1:
            return Replay(oldest, list(self._buffer))
        return Replay(None, [f for f in self._buffer if f.id > last_id])

    def unsubscribe(self, sub: Subscriber) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    def close(self) -> None:
        """End every open stream (stream/watch gets capsule-closed); later subscribers end at once."""
        with self._lock:
            self._closed = True
            for sub in self._subscribers:
                sub.push(CLOSED)
            self._subscribers.clear()

    @property
    def subscribers(self) -> int:
        """How many streams are subscribed (diagnostics, tests)."""
        with self._lock:
            return len(self._subscribers)

    @property
    def last_id(self) -> int:
        with self._lock:
            return self._next_id - 1
