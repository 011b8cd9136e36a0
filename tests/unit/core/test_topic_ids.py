"""Topic ids at the topology seam: Kafka's text form parsed and written back, and the
id-to-name index (a topic created again under its name has a new id; the old one then
names nothing)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from app.common.errors import UnknownTopicId, UnknownTopicOrPartition
from app.core.local_topology import LocalTopology
from app.core.log.manager import LogManager
from app.core.topology import ZERO_TOPIC_ID, TopicIdIndex, parse_topic_id, topic_id_text


def test_kafka_text_form_round_trips() -> None:
    some = uuid.uuid4()
    text = topic_id_text(some)
    assert len(text) == 22 and "=" not in text
    assert parse_topic_id(text) == some
    # A topic older than ids, or a damaged id, has the zero id (Kafka's "no id").
    assert parse_topic_id("") == ZERO_TOPIC_ID
    assert parse_topic_id("not base64!") == ZERO_TOPIC_ID
    assert parse_topic_id(topic_id_text(some)[:10]) == ZERO_TOPIC_ID


def test_index_follows_creation_deletion_and_recreation() -> None:
    ids: dict[str, uuid.UUID] = {"a": uuid.uuid4(), "b": uuid.uuid4(), "old": ZERO_TOPIC_ID}

    def id_of(name: str) -> uuid.UUID:
        if name not in ids:
            raise UnknownTopicOrPartition(name)
        return ids[name]

    index = TopicIdIndex(lambda: list(ids), id_of)
    assert index.name_of(ids["a"]) == "a"
    ids["c"] = uuid.uuid4()  # created after the index was built
    assert index.name_of(ids["c"]) == "c"
    first = ids["a"]
    ids["a"] = uuid.uuid4()  # deleted and created again
    with pytest.raises(UnknownTopicId) as caught:
        index.name_of(first)
    assert caught.value.error_code == "UNKNOWN_TOPIC_ID"
    assert caught.value.topic_id == topic_id_text(first)
    assert index.name_of(ids["a"]) == "a"
    del ids["b"]
    with pytest.raises(UnknownTopicId):
        index.name_of(uuid.UUID(int=ids.pop("c").int))
    # The zero id names no topic, not even one without an id.
    with pytest.raises(UnknownTopicId):
        index.name_of(ZERO_TOPIC_ID)


def test_a_lone_brokers_topic_ids_survive_a_restart(tmp_path: Path) -> None:
    """LocalTopology answers the id LogManager made at creation, read back from the
    topic's file by the next LogManager on the same data directory."""
    logs = LogManager(tmp_path / "data")
    logs.start()
    try:
        logs.create_topic("orders", 2, {})
        first = LocalTopology(logs, 0, "http://b0")
        topic_id = first.topic_id("orders")
        assert topic_id != ZERO_TOPIC_ID
        assert first.topic_named_by(topic_id) == "orders"
    finally:
        logs.shutdown()
    again = LogManager(tmp_path / "data")
    again.start()
    try:
        second = LocalTopology(again, 0, "http://b0")
        assert second.topic_id("orders") == topic_id
        assert second.topic_named_by(topic_id) == "orders"
        with pytest.raises(UnknownTopicOrPartition):
            second.topic_id("missing")
    finally:
        again.shutdown()
