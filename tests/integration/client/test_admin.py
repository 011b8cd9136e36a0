"""Admin against a real broker."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from app.client import Admin, OffsetAndTimestamp, Producer, TopicPartition
from app.common.errors import InvalidPartitions, TopicAlreadyExists, UnknownTopicOrPartition


def test_topic_lifecycle_and_offsets(broker_url: str) -> None:
    name = "sdk-admin-topic"
    with Admin(broker_url) as admin:
        desc = admin.create_topic(name, 3, configs={"cleanup.policy": "delete"})
        assert [p.partition for p in desc.partitions] == [0, 1, 2]
        assert all(p.high_watermark == 0 and p.isr == [p.leader] for p in desc.partitions)
        with pytest.raises(TopicAlreadyExists) as info:
            admin.create_topic(name, 3)
        assert info.value.topic == name
        with pytest.raises(InvalidPartitions):
            admin.create_topic("sdk-admin-bad", 0)
        assert admin.list_topics()[name] == 3
        with Producer(broker_url) as p:
            for i in range(5):
                p.send(name, b"x", partition=1, timestamp=100 + i)
        tp = TopicPartition(name, 1)
        assert admin.list_offsets([tp], "earliest") == {tp: OffsetAndTimestamp(0, -1)}
        assert admin.list_offsets([tp], "latest") == {tp: OffsetAndTimestamp(5, -1)}
        assert admin.list_offsets([tp], 102) == {tp: OffsetAndTimestamp(2, 102)}
        assert admin.list_offsets([tp], 10_000) == {tp: None}
        with pytest.raises(ValueError):
            admin.list_offsets([tp], "middle")
        assert admin.describe_topic(name).partitions[1].high_watermark == 5
        admin.delete_topic(name)
        with pytest.raises(UnknownTopicOrPartition):
            admin.delete_topic(name)
        assert name not in admin.list_topics()


def test_results_carry_every_field_the_broker_answers(broker_url: str) -> None:
    """``logbus topics describe --json`` and ``groups list --json`` print these results."""
    name = "sdk-admin-fields"
    with Admin(broker_url) as admin:
        desc = admin.create_topic(name, 2, configs={"retention.ms": 60000})
        assert desc.config_overrides == {"retention.ms": 60000}
        assert [p.leader_epoch for p in desc.partitions] == [0, 0]
        assert (
            dataclasses.asdict(admin.describe_topic(name))
            == httpx.get(f"{broker_url}/topics/{name}").json()
        )
        group = "sdk-admin-fields-group"
        joined = httpx.post(
            f"{broker_url}/groups/{group}/heartbeat",
            json={"member_id": "m1", "member_epoch": 0, "subscribed_topics": [name]},
        )
        assert joined.status_code == 200, joined.text
        listed = [dataclasses.asdict(g) for g in admin.list_groups()]
        assert listed == httpx.get(f"{broker_url}/groups").json()["groups"]
        assert [g["protocol_type"] for g in listed if g["group"] == group] == ["consumer"]
