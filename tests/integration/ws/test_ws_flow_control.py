"""Flow control: a slow or stalled subscriber holds the broker's memory bounded.

``logbus_ws_buffered_bytes`` counts the record bytes subscriptions have read
and not yet handed to the transport; its peak must stay under a couple of
chunks while a producer writes 100 MB past a subscriber that grants no credit
and another that grants unlimited credit but never reads.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from ws_helpers import LiveBroker, recv, send, subscribe

from app.api.ws.protocol import MAX_CREDIT
from app.api.ws.subscribe import CHUNK_BYTES
from app.common.batch import BatchBuilder

OCTET = {"content-type": "application/octet-stream"}

TOTAL_BYTES = 100 * 1024 * 1024
RECORD = b"r" * 1000
RECORDS_PER_BATCH = 500  # ~0.5 MB batches
BOUND = 2 * 1024 * 1024


def batch() -> bytes:
    builder = BatchBuilder()
    for _ in range(RECORDS_PER_BATCH):
        builder.append(RECORD)
    return builder.build()


@pytest.mark.slow
def test_stalled_subscribers_keep_memory_bounded_under_100_mb(broker: LiveBroker) -> None:
    broker.create_topic("big")
    body = batch()
    batches = TOTAL_BYTES // len(body) + 1
    url = broker.ws_url("/ws/subscribe")

    def produce_all() -> None:
        with httpx.Client(base_url=broker.url, timeout=60) as c:
            for _ in range(batches):
                r = c.post("/topics/big/partitions/0/batches", content=body, headers=OCTET)
                assert r.status_code == 200, r.text

    async def main() -> None:
        zero, _ = await subscribe(url, topics=["big"], credit={"records": 0})
        # max_queue=1: the client library stops reading the socket after one frame,
        # so TCP pushes back on the broker at once.
        stalled = await connect(url, max_size=None, max_queue=1)
        await send(
            stalled, {"type": "subscribe", "topics": ["big"], "credit": {"records": MAX_CREDIT}}
        )
        await asyncio.to_thread(produce_all)
        await asyncio.sleep(0.5)
        stats = broker.stats
        assert stats.buffered_bytes_peak > 0  # the stalled one did get data flowing
        assert stats.buffered_bytes_peak < BOUND, stats.buffered_bytes_peak
        assert stats.socket_buffered_bytes_peak <= CHUNK_BYTES + len(body)
        assert stats.buffered_bytes <= CHUNK_BYTES + len(body)
        # The zero-credit subscriber got nothing, and gets records as soon as it asks.
        with pytest.raises(TimeoutError):
            await recv(zero, 0.2)
        await send(zero, {"type": "seek", "topic": "big", "partition": 0, "offset": 0})
        await send(zero, {"type": "credit", "records": 10})
        frame = await recv(zero)
        assert [r["offset"] for r in frame["records"]] == list(range(10))
        await zero.close()
        stalled.transport.abort()  # a client that vanished without a close handshake

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while broker.stats.connections["subscribe"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert broker.stats.connections["subscribe"] == 0
    assert broker.stats.buffered_bytes == 0
