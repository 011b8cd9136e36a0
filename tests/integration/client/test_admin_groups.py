"""Admin's consumer-group calls against a real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from app.client import Admin, AsyncAdmin, Producer, TopicPartition
from app.common.group_errors import NonEmptyGroup


def _join(url: str, group: str, topic: str, member: str) -> None:
    r = httpx.post(
        f"{url}/groups/{group}/heartbeat",
        json={"member_id": member, "member_epoch": 0, "subscribed_topics": [topic]},
    )
    assert r.status_code == 200, r.text


def _leave(url: str, group: str, member: str) -> None:
    r = httpx.post(
        f"{url}/groups/{group}/heartbeat", json={"member_id": member, "member_epoch": -1}
    )
    assert r.status_code == 200, r.text


def test_group_admin_round_trip(broker_url: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    with Producer(broker_url) as producer:
        producer.send_many(topic, [b"x"] * 10, partition=0)
        producer.send_many(topic, [b"y"] * 4, partition=1)
    group = f"admin-{topic}"
    with Admin(broker_url) as admin:
        _join(broker_url, group, topic, "m1")
        listed = {g.group: g for g in admin.list_groups()}
        assert listed[group].members == 1
        with pytest.raises(NonEmptyGroup):
            admin.delete_group(group)
        with pytest.raises(NonEmptyGroup):
            admin.reset_group_offsets(group, topic, "earliest")
        _leave(broker_url, group, "m1")

        reset = admin.reset_group_offsets(group, topic, "latest")
        assert reset == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 4}
        admin.reset_group_offsets(group, topic, "offset", 3, partitions=[0])
        assert admin.list_group_offsets(group, topic) == {
            TopicPartition(topic, 0): 3,
            TopicPartition(topic, 1): 4,
        }
        described = admin.describe_group(group)
        lag = {(o["partition"], o["lag"]) for o in described["offsets"]}
        assert lag == {(0, 7), (1, 0)}
        with pytest.raises(ValueError):
            admin.reset_group_offsets(group, topic, "timestamp")

        admin.delete_group(group)
        assert group not in {g.group for g in admin.list_groups()}


def test_async_group_admin(broker_url: str, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=1)
    group = f"async-{topic}"

    async def main() -> None:
        async with AsyncAdmin(broker_url) as admin:
            assert await admin.reset_group_offsets(group, topic, "earliest") == {
                TopicPartition(topic, 0): 0
            }
            assert await admin.list_group_offsets(group) == {TopicPartition(topic, 0): 0}
            assert group in {g.group for g in await admin.list_groups()}
            await admin.delete_group(group)

    asyncio.run(main())
