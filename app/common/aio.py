"""asyncio helpers the broker and the SDK share.

Why not ``asyncio.wait_for(event.wait(), t)``: on Python 3.11 ``wait_for`` returns
the result of an inner wait woken in the same loop step as a cancellation of the
caller and drops the cancellation (fixed in 3.12), so a task being cancelled (a
consumer, a heartbeat loop, a broker stopping) may go on running. ``asyncio.timeout``
(3.11+) keeps the cancellation: it is the one way here to wait with a deadline.
"""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until ``event`` is set or ``timeout_s`` passes; whether it is set.

    A cancellation of the caller always propagates. A ``timeout_s`` at or below zero
    only looks.
    """
    if event.is_set():
        return True
    if timeout_s <= 0:
        return False
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True
