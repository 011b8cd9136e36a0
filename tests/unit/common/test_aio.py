"""wait_event: a deadline on an asyncio.Event that never swallows a cancellation."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable

import pytest

from app.common.aio import wait_event


async def _wait_for(event: asyncio.Event, timeout_s: float) -> bool:
    """The pattern wait_event replaces, for contrast."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        return False
    return True


async def _set_and_cancel_in_one_step(
    wait: Callable[[asyncio.Event, float], Awaitable[bool]],
) -> bool:
    """Whether a task waiting with ``wait`` kept a cancellation that came with the wake-up."""
    event = asyncio.Event()
    task = asyncio.create_task(wait(event, 10))
    await asyncio.sleep(0)  # the task now waits on the event
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


def test_a_cancellation_that_comes_with_the_wake_up_is_kept() -> None:
    assert asyncio.run(_set_and_cancel_in_one_step(wait_event))


def test_timeouts_and_set_events() -> None:
    async def main() -> None:
        event = asyncio.Event()
        assert not await wait_event(event, 0.01)
        assert not await wait_event(event, 0)
        asyncio.get_running_loop().call_later(0.01, event.set)
        assert await wait_event(event, 5)
        assert await wait_event(event, 0)

    asyncio.run(main())


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for keeps the cancellation from 3.12")
def test_wait_for_loses_that_cancellation_on_3_11() -> None:
    """Why wait_event exists: if this starts passing on 3.11, the reason is gone."""
    assert not asyncio.run(_set_and_cancel_in_one_step(_wait_for))
