"""Driving a generator that yields what it needs done: the one loop every sans-I/O flow
of the SDK runs in.

A flow (the cluster routes in :mod:`app.client._cluster`, the consumer's flows in
:mod:`app.client.consumer.base`) yields an operation, gets its result sent back, or the
exception it raised thrown in, and returns its value. :func:`drive_sync` performs the
operations by blocking calls, :func:`drive_async` by awaiting them (one loop: the blocking
driver runs the asyncio one with a perform that never suspends); the rules live in the
flows, written once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

OpT = TypeVar("OpT")  # what a flow yields
T = TypeVar("T")


async def drive_async(flow: Generator[OpT, Any, T], perform: Callable[[OpT], Awaitable[Any]]) -> T:
    """``flow``'s value, each operation it yields awaited through ``perform``."""
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = flow.send(result) if error is None else flow.throw(error)
        except StopIteration as stop:
            value: T = stop.value
            return value
        finally:
            error = None  # not kept alive by this frame once thrown in
        try:
            result = await perform(op)
        except BaseException as exc:
            result, error = None, exc


def drive_sync(flow: Generator[OpT, Any, T], perform: Callable[[OpT], Any]) -> T:
    """``flow``'s value, each operation it yields done by ``perform``.

    The loop is :func:`drive_async`'s: its ``perform`` here returns without ever
    suspending, so the coroutine runs to its end on the first ``send`` and is never
    handed to an event loop (this works inside or outside one).
    """

    async def perform_now(op: OpT) -> Any:
        return perform(op)

    run = drive_async(flow, perform_now)
    try:
        run.send(None)
    except StopIteration as stop:
        value: T = stop.value
        return value
    run.close()  # not reached: nothing in perform_now awaits
    raise RuntimeError("a blocking flow suspended")
