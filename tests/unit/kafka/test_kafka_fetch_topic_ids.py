"""Fetch v13+'s topic ids at the door, against a topology whose id lookup is the real
TopicIdIndex (one pass over the topics for each id it does not know), in process:

- a request naming thousands of unknown ids costs three passes at most (the index's own
  on a known id it has not met yet, its own on the first unknown one, the request's
  map), not one per id;
- a session partition whose id named no topic when it joined is resolved again on each
  fetch, as Kafka's fetch sessions resolve unknown names (a broker that learns of the
  topic later serves it from then on, instead of UNKNOWN_TOPIC_ID for ever);
- ConsumerGroupHeartbeat's owned partitions, by id, resolved the same way;
- Metadata v12 and DeleteTopics v6 naming topics by id alone, the same way (a request of
  thousands of unknown ids blocked the event loop for a pass over the topics each).
"""

from __future__ import annotations

import asyncio
import datetime
import random
import uuid
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.request import FetchPartition, FetchRequest, FetchTopic

from app.common.errors import NotLeaderOrFollower, UnknownTopicOrPartition
from app.core.topology import TopicIdIndex
from app.kafka.apis.admin import delete_topics
from app.kafka.apis.base import Context, TopicIdNames
from app.kafka.apis.cluster import metadata
from app.kafka.apis.records import fetch
from app.kafka.fetch_sessions import FetchSessionCache


class Topology:
    """What Fetch asks of the topology, topic ids looked up as the brokers' are; every
    partition led elsewhere (NOT_LEADER_OR_FOLLOWER), so a resolved id is told apart
    from an unknown one without logs. ``passes``: the times the topics were listed."""

    def __init__(self, topics: int) -> None:
        self.ids = {f"t{i}": uuid.uuid4() for i in range(topics)}
        self.passes = 0
        self._index = TopicIdIndex(self.topics, self.topic_id)

    def topics(self) -> list[str]:
        self.passes += 1
        return list(self.ids)

    def topic_id(self, name: str) -> uuid.UUID:
        try:
            return self.ids[name]
        except KeyError:
            raise UnknownTopicOrPartition(name) from None

    def topic_named_by(self, topic_id: uuid.UUID) -> str:
        return self._index.name_of(topic_id)

    def leader_partition(self, topic: str, partition: int) -> Any:
        self.topic_id(topic)
        raise NotLeaderOrFollower(topic, partition)

    def partition_info(self, topic: str, partition: int) -> Any:
        raise UnknownTopicOrPartition(topic, partition)

    def partition_count(self, topic: str) -> int:
        self.topic_id(topic)
        return 0  # the partitions' own answers are not what these tests read

    # Metadata's view of the cluster: one broker, no other Kafka listener.
    cluster_id = "test-cluster"
    broker_id = 0
    controller_id = 0
    brokers: dict[int, Any] = {}


def _ctx(topology: Topology) -> Context:
    state: Any = SimpleNamespace(
        topology=topology, settings=SimpleNamespace(fetch_max_bytes=1 << 20), waiters=None
    )
    return Context(
        state=state,
        advertised=("localhost", 9092),
        txn=lambda: None,
        groups=lambda: None,
        fetch_sessions=FetchSessionCache(slots=4, eviction_ms=60_000, rng=random.Random(1)),
    )


def _fetch(ctx: Context, ids: list[uuid.UUID], session_id: int = 0, epoch: int = -1) -> Any:
    request = FetchRequest(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        session_id=session_id,  # type: ignore[arg-type]
        session_epoch=epoch,  # type: ignore[arg-type]
        topics=tuple(
            FetchTopic(
                topic_id=topic_id,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024),  # type: ignore[arg-type]
                ),
            )
            for topic_id in ids
        ),
        forgotten_topics_data=(),
    )
    return asyncio.run(fetch(ctx, request, 16))


def _codes(response: Any) -> dict[Any, ErrorCode]:
    return {t.topic_id: t.partitions[0].error_code for t in response.responses}


def test_unknown_ids_cost_a_few_passes_over_the_topics_not_one_each() -> None:
    topology = Topology(50)
    ctx = _ctx(topology)
    known = topology.ids["t7"]
    unknown = [uuid.uuid4() for _ in range(2000)]
    # Sessionless and in a new session alike.
    for epoch in (-1, 0):
        topology.passes = 0
        codes = _codes(_fetch(ctx, [known, *unknown], epoch=epoch))
        assert topology.passes <= 3
        assert codes[known] == ErrorCode.not_leader_or_follower
        assert {codes[u] for u in unknown} == {ErrorCode.unknown_topic_id}


def test_a_session_partition_of_an_unknown_id_is_resolved_once_the_topic_is_known() -> None:
    topology = Topology(3)
    ctx = _ctx(topology)
    late = uuid.uuid4()
    full = _fetch(ctx, [late], epoch=0)
    assert _codes(full) == {late: ErrorCode.unknown_topic_id}
    session = int(full.session_id)
    assert session != 0
    # The broker learns of the topic: the next incremental fetch reads it by its name.
    topology.ids["late"] = late
    answer = _fetch(ctx, [], session_id=session, epoch=1)
    assert answer.error_code == ErrorCode.none
    assert _codes(answer) == {late: ErrorCode.not_leader_or_follower}


def test_topic_id_names_of_one_request() -> None:
    topology = Topology(10)
    names = TopicIdNames(topology)  # type: ignore[arg-type]
    assert names.name_of(None) is None
    assert names.name_of(uuid.UUID(int=0)) is None
    assert topology.passes == 0
    for _ in range(100):
        assert names.name_of(uuid.uuid4()) is None
    for name, topic_id in topology.ids.items():
        assert names.name_of(topic_id) == name
    assert topology.passes <= 3


def test_metadata_and_delete_topics_by_unknown_ids_cost_a_few_passes() -> None:
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    topology = Topology(50)
    ctx = _ctx(topology)
    known = topology.ids["t7"]
    unknown = [uuid.uuid4() for _ in range(2000)]
    asked = MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=i, name=None) for i in [known, *unknown]),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    topology.passes = 0
    answer = asyncio.run(metadata(ctx, asked, 12))
    assert topology.passes <= 3
    codes = {t.topic_id: t.error_code for t in answer.topics}
    assert codes[known] == ErrorCode.none
    assert {codes[u] for u in unknown} == {ErrorCode.unknown_topic_id}
    assert all(t.name is None for t in answer.topics if t.topic_id != known)

    deleting = DeleteTopicsRequest(
        topics=tuple(DeleteTopicState(name=None, topic_id=i) for i in unknown),
        timeout=datetime.timedelta(seconds=1),  # type: ignore[arg-type]
    )
    topology.passes = 0
    deleted = asyncio.run(delete_topics(ctx, deleting, 6))
    assert topology.passes <= 3
    assert {r.error_code for r in deleted.responses} == {ErrorCode.unknown_topic_id}
    assert all(r.name is None for r in deleted.responses)
