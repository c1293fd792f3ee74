"""`wait_for(awaitable, timeout)`: asyncio.wait_for without its Python 3.11 flaw.

On 3.11 `asyncio.wait_for` returns the inner result when a cancel of the waiting task arrives as
that result does: the cancel is lost, and a task its owner stopped (a stream whose client left, a
connection at shutdown) goes on. `asyncio.timeout` delivers every cancel. Both raise TimeoutError
(asyncio.TimeoutError is the same class from 3.11 on). Same arguments as asyncio's.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

T = TypeVar("T")


async def wait_for(awaitable: Awaitable[T], timeout: float | None) -> T:
    """The result of `awaitable`, or TimeoutError after `timeout` seconds (None: no limit)."""
    async with asyncio.timeout(timeout):
        return await awaitable
