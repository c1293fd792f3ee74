"""Connection limits uvicorn does not have, as an h11 protocol subclass it is configured with.

uvicorn's only timer is the keep-alive one, and any byte cancels it: a client that sends half a
request line, or a header every few seconds, holds its connection (and a file descriptor) for
ever. Nor does it bound open connections (``limit_concurrency`` only answers 503 to *requests*).
:class:`GuardedH11Protocol` adds:

* a deadline for the request head: ``head_timeout`` seconds from accept, or from the end of the
  previous response, to a complete request line and headers, however the bytes trickle in; then
  ``408`` and close;
* a cap on open connections: at ``max_connections`` a new connection first evicts the oldest one
  that is not being answered (idle, still sending its head, or still sending its body) and has
  been open at least ``EVICT_AFTER``; with none such it is let in over the cap, up to twice the
  cap, past which it gets ``503`` and is closed. A flood of idle or slow connections therefore
  cannot lock out a client that sends a request promptly;
* a write-stall deadline: a connection whose client reads nothing while the server has output
  queued (the socket buffers are full) for ``stall_timeout`` seconds is aborted. This is what ends
  an SSE client that never reads.

The body deadline and the stream cap are the door's (mur/a2a/server.py), which can answer them
with a JSON-RPC error. All numbers: :class:`DoorLimits`, overridable by environment variables.
"""

from __future__ import annotations

import asyncio
import time
from uvicorn.protocols.http.h11_impl import H11Protocol

from mur.a2a.listen import DoorLimits  # noqa: F401 - the door's numbers live with the listener (no uvicorn there)

EVICT_AFTER = 1.0  # seconds a connection must have been open before the cap may evict it

_REFUSALS = {
    408: b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    503: b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the head deadline, the connection cap and the stall deadline."""

    def __init__(self, *args, limits: DoorLimits, **kwargs):
        super().__init__(*args, **kwargs)
        self.limits = limits
        self.opened = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._stall: asyncio.TimerHandle | None = None
        self._head_of = None  # the request cycle whose head already arrived

    # --- accept -------------------------------------------------------------------------------

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Closed connections stay in the set until connection_lost runs: count only the live ones.
        others = [c for c in self.connections if c is not self and not c.transport.is_closing()]
        if len(others) >= self.limits.max_connections:
            # Only a connection idle for EVICT_AFTER may go: a younger one may hold request bytes
            # not read yet (the loop accepts a burst before it reads), and closing it would reset
            # a client that did nothing wrong. Younger ones are let in over the cap, up to twice it.
            oldest = time.monotonic() - EVICT_AFTER
            idle = [c for c in others if isinstance(c, GuardedH11Protocol) and not c.answering and c.opened <= oldest]
            if idle:
                min(idle, key=lambda c: c.opened).transport.close()
            elif len(others) >= 2 * self.limits.max_connections:
                self._refuse(503)
                return
        self._await_head()

    @property
    def answering(self) -> bool:
        """Is the app working on a complete request (or streaming its answer) on this connection?"""
        cycle = self.cycle
        return cycle is not None and not cycle.response_complete and not cycle.more_body

    # --- head deadline ------------------------------------------------------------------------

    def _await_head(self) -> None:
        self._cancel_timer()
        if not self.transport.is_closing():
            self._timer = self.loop.call_later(self.limits.head_timeout, self._refuse, 408)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_arrived(self) -> bool:
        if self.cycle is not None and self.cycle is not self._head_of:
            self._head_of = self.cycle
            self._cancel_timer()
            return True
        return False

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._head_arrived()

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request already buffered
        if not self._head_arrived():
            self._await_head()

    def _refuse(self, status: int) -> None:
        """Answer ``status`` outside the h11 state machine (no request is being answered) and close."""
        self._timer = None
        if self.transport.is_closing() or self.answering:
            return
        self.transport.write(_REFUSALS[status])
        self.transport.close()

    # --- write stall --------------------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(self.limits.stall_timeout, self.transport.abort)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().connection_lost(exc)
