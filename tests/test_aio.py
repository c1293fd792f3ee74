"""mur.aio.wait_for: asyncio.wait_for's arguments and TimeoutError, and a cancel is never lost."""

from __future__ import annotations

import asyncio

import pytest

from mur.aio import wait_for


def test_a_result_a_timeout_and_no_limit():
    async def main() -> None:
        assert await wait_for(asyncio.sleep(0, "done"), 1) == "done"
        with pytest.raises(asyncio.TimeoutError):
            await wait_for(asyncio.sleep(5), 0.01)
        assert await wait_for(asyncio.sleep(0, "any"), None) == "any"

    asyncio.run(main())


def test_a_cancel_that_arrives_with_the_result_cancels():
    """asyncio.wait_for on 3.11 returns the result here; a task whose owner stopped it goes on."""
    async def main() -> None:
        fut = asyncio.get_running_loop().create_future()
        waiting = asyncio.create_task(wait_for(fut, 30))
        await asyncio.sleep(0)
        fut.set_result("late")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
