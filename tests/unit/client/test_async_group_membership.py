"""The asyncio consumer's group membership (app.client.group.AsyncGroupMembership): its
heartbeat task stops, and the member leaves, whatever the timing of close()."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from app.client._cluster import Cluster
from app.client.group import AsyncGroupMembership

URL = "http://broker-1:8080"


def test_close_in_the_step_a_heartbeat_is_due_stops_and_leaves() -> None:
    """A wakeup (a revocation to acknowledge, a commit's beat_now) in the very step that
    close() cancels the heartbeat task: the cancellation must not be lost (asyncio.wait_for
    on 3.11 drops it), or close() never returns and the member never leaves."""
    epochs: list[int] = []

    def broker(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/coordinator":
            return httpx.Response(200, json={"node_id": 1, "url": URL, "key": "g", "partition": 0})
        body: dict[str, Any] = json.loads(request.content)
        epochs.append(body["member_epoch"])
        epoch = body["member_epoch"] if body["member_epoch"] < 0 else 1
        return httpx.Response(
            200,
            json={
                "member_id": "m",
                "member_epoch": epoch,
                "heartbeat_interval_ms": 60_000,
                "assignment": {"partitions": []},
            },
        )

    async def main() -> None:
        member = AsyncGroupMembership(
            Cluster(URL),
            "g",
            topics=["t"],
            pattern=None,
            instance_id=None,
            server_assignor=None,
            rebalance_timeout_ms=None,
            retry_backoff_ms=10,
            request_timeout_ms=5_000,
            transport=httpx.MockTransport(broker),
        )
        member.start()
        for _ in range(10_000):
            if member.beats:
                break
            await asyncio.sleep(0.001)
        for _ in range(20):
            await asyncio.sleep(0)  # the task is waiting for its next heartbeat
        assert epochs == [0]
        member._notify()
        closing = asyncio.ensure_future(member.close(leave=True))
        # Bounded only so that the old behaviour fails instead of hanging the suite.
        done, _ = await asyncio.wait({closing}, timeout=30)
        assert closing in done, "close() is stuck behind a heartbeat task that never stops"
        assert epochs[-1] == -1

    asyncio.run(main())
