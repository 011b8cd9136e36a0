"""Test-only fault injection: a slow disk under leader appends, followers that stop
fetching.

``LOGBUS_TEST_SLOW_APPEND_MS=N`` (read once, when this module is imported) makes
every leader append sleep a random 0..N ms first, inside the partition's
leader/ISR lock, where a slow write or fsync would stall. The replication-safety
tests set it on their brokers to widen the window between a request's leadership
check and its write, where leadership may move. Unset (the default, and always in
production) it costs one comparison per append.

``LOGBUS_TEST_HOLD_FETCHES=DIR`` (read once too): while the file ``DIR/<broker id>``
exists, that broker's follower fetchers send nothing (no fetch, no truncation
request); a fetch already out finishes. A test holds a follower to keep a leader's
high watermark where it is (a new leader's, lagging the start of its epoch, answers
ListOffsets ``latest`` with OFFSET_NOT_AVAILABLE until its followers fetch), then
deletes the file. Unset, it costs one comparison per fetch.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

_SLOW_APPEND_MS = float(os.environ.get("LOGBUS_TEST_SLOW_APPEND_MS", "0") or 0)
_HOLD_FETCHES = os.environ.get("LOGBUS_TEST_HOLD_FETCHES") or None


def slow_append() -> None:
    if _SLOW_APPEND_MS > 0:
        time.sleep(random.uniform(0, _SLOW_APPEND_MS) / 1000)


async def hold_fetches(broker_id: int) -> None:
    """Until ``LOGBUS_TEST_HOLD_FETCHES/<broker_id>`` does not exist (at once when unset)."""
    if _HOLD_FETCHES is None:
        return
    flag = Path(_HOLD_FETCHES) / str(broker_id)
    while flag.exists():
        await asyncio.sleep(0.01)
