"""Driving a generator that yields what it needs done: the two loops every sans-I/O flow
of the SDK runs in.

A flow (the cluster routes in :mod:`app.client._cluster`, the consumer's flows in
:mod:`app.client.consumer.base`) yields an operation, gets its result sent back, or the
exception it raised thrown in, and returns its value. :func:`drive_sync` performs the
operations by blocking calls, :func:`drive_async` by awaiting them; the rules live in the
flows, written once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

OpT = TypeVar("OpT")  # what a flow yields
T = TypeVar("T")


def drive_sync(flow: Generator[OpT, Any, T], perform: Callable[[OpT], Any]) -> T:
    """``flow``'s value, each operation it yields done by ``perform``."""
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
            result = perform(op)
        except BaseException as exc:
            result, error = None, exc


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
