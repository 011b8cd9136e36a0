"""Topic ids at the topology seam: Kafka's text form parsed and written back, and the
id-to-name index (a topic created again under its name has a new id; the old one then
names nothing)."""

from __future__ import annotations

import uuid

import pytest

from app.common.errors import UnknownTopicId, UnknownTopicOrPartition
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
