"""FrameCache (app/api/ws/frames.py): the last subscriber out empties it, so frames
no socket will ask for do not stay alive (issue #12: memory returns after a crowd left)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from app.api.ws.frames import FrameCache, Rendered


def test_the_last_subscriber_out_empties_the_cache() -> None:
    # The cache reads only these attributes of a Log.
    log: Any = SimpleNamespace(topic="t", partition=0, truncations=0, log_start_offset=0)
    frame = "x" * 100_000

    async def render() -> Rendered:
        return frame, 10, 1000, 10, 1000

    async def main() -> tuple[int, int, int]:
        cache = FrameCache()
        cache.join()
        cache.join()
        await cache.get(log, ("json", "json", "json"), 0, None, 1 << 20, render)
        held = cache.held_bytes
        cache.leave()
        still = cache.held_bytes  # one subscriber left: the frame stays shared
        cache.leave()
        return held, still, cache.held_bytes

    assert asyncio.run(main()) == (100_000, 100_000, 0)
