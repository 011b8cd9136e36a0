"""KIP-848's consumer group protocol on the Kafka door: librdkafka with
``group.protocol=consumer`` (ConsumerGroupHeartbeat, assignments by topic id, Metadata
v12 lookups by id, Fetch v13+) in one group with an HTTP member, the assignment disjoint
and complete at every stable point; ConsumerGroupDescribe through confluent-kafka's
admin client; the error paths spoken with kio."""

from __future__ import annotations

import datetime
import logging
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, ConsumerGroupType, Producer
from confluent_kafka.admin import AdminClient
from kafka_harness import KafkaBroker, kio_call, start_broker, stop_broker, wait_for
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_describe.v1.response import ConsumerGroupDescribeResponse
from kio.schema.consumer_group_heartbeat.v0.request import (
    ConsumerGroupHeartbeatRequest as HeartbeatV0,
)
from kio.schema.consumer_group_heartbeat.v0.response import (
    ConsumerGroupHeartbeatResponse as HeartbeatResponseV0,
)
from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from kio.schema.consumer_group_heartbeat.v1.response import ConsumerGroupHeartbeatResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_commit.v9.response import OffsetCommitResponse

PARTITIONS = 6
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One broker for the module, members told to heartbeat every 300 ms (so a
    reconciliation takes a few round trips of that, not of Kafka's 5 s)."""
    b = start_broker(
        tmp_path_factory.mktemp("k848"),
        ("LOGBUS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", "300"),
    )
    yield b
    stop_broker(b)


def _topic(broker: KafkaBroker, partitions: int = PARTITIONS) -> str:
    topic = f"k848-{uuid.uuid4().hex[:8]}"
    r = httpx.post(f"{broker.url}/topics", json={"name": topic, "partitions": partitions})
    assert r.status_code == 201, r.text
    return topic


def _topic_id(broker: KafkaBroker, topic: str) -> uuid.UUID:
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (answer,) = kio_call(broker, request, MetadataResponse).topics
    return uuid.UUID(str(answer.topic_id))


class HttpMember:
    """A KIP-848 member over HTTP (``POST /groups/{g}/heartbeat``), heartbeating on a
    thread every 200 ms and reporting what it owns: the answer's assignment, at once."""

    def __init__(self, broker: KafkaBroker, group: str, topic: str) -> None:
        self.url = f"{broker.url}/groups/{group}/heartbeat"
        self.topic = topic
        self.member_id = ""
        self.epoch = 0
        self.owned: set[int] = set()
        self.error: str | None = None
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _beat(self, epoch: int | None = None) -> None:
        body: dict[str, Any] = {
            "member_id": self.member_id,
            "member_epoch": self.epoch if epoch is None else epoch,
            "owned_partitions": [{"topic": self.topic, "partitions": sorted(self.owned)}],
        }
        if self.epoch == 0:
            body["subscribed_topics"] = [self.topic]
        r = httpx.post(self.url, json=body, timeout=30)
        if r.status_code != 200:
            self.error = r.text
            return
        answer = r.json()
        self.member_id, self.epoch = answer["member_id"], answer["member_epoch"]
        self.owned = {
            p
            for t in answer["assignment"]["partitions"]
            if t["topic"] == self.topic
            for p in t["partitions"]
        }

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._beat()

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._beat(epoch=-1)


def _consumer(broker: KafkaBroker, group: str, logs: list[str] | None = None) -> Consumer:
    config: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if logs is None:
        return Consumer(config)

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logs.append(record.getMessage())

    logger = logging.getLogger(f"librdkafka-{group}")
    logger.addHandler(Collect())
    logger.setLevel(logging.DEBUG)
    return Consumer({**config, "debug": "protocol"}, logger=logger)


def test_librdkafka_and_an_http_member_share_one_group(broker: KafkaBroker) -> None:
    topic, group = _topic(broker), f"mixed-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(120):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    http_member = HttpMember(broker, group, topic)
    wait_for("the HTTP member to own every partition", lambda: len(http_member.owned) == PARTITIONS)

    logs: list[str] = []
    consumer = _consumer(broker, group, logs)
    consumer.subscribe([topic])
    seen: dict[int, list[int]] = {}
    try:

        def split() -> bool:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen.setdefault(message.partition(), []).append(message.offset())
            kafka_side = {tp.partition for tp in consumer.assignment()}
            return (
                bool(kafka_side)
                and bool(http_member.owned)
                and not kafka_side & http_member.owned
                and kafka_side | http_member.owned == set(range(PARTITIONS))
            )

        wait_for("the two members to split the partitions", split)
        kafka_side = {tp.partition for tp in consumer.assignment()}
        # The group as HTTP describes it: two members, the same split, epochs caught up.
        described = httpx.get(f"{broker.url}/groups/{group}", timeout=30).json()
        assert described["state"] == "Stable"
        by_member = {
            m["member_id"]: {p for t in m["assignment"] for p in t["partitions"]}
            for m in described["members"]
        }
        assert by_member.pop(http_member.member_id) == http_member.owned
        assert list(by_member.values()) == [kafka_side]
        assert {m["member_epoch"] for m in described["members"]} == {described["group_epoch"]}

        # librdkafka reads its own partitions from the start, commits with its member epoch.
        def read_all() -> bool:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                seen.setdefault(message.partition(), []).append(message.offset())
            return all(len(set(seen.get(p, ()))) == 120 // PARTITIONS for p in kafka_side)

        wait_for("librdkafka to read its partitions", read_all)
        assert set(seen) <= kafka_side  # nothing from the HTTP member's partitions
        consumer.commit(asynchronous=False)
        offsets = httpx.get(f"{broker.url}/groups/{group}/offsets", timeout=30).json()["offsets"]
        assert {(o["partition"], o["offset"]) for o in offsets} == {
            (p, 120 // PARTITIONS) for p in kafka_side
        }

        # A second HTTP member joins: librdkafka must give partitions up (it reports what
        # it owns by topic id) before they move; the three end disjoint and complete.
        second = HttpMember(broker, group, topic)

        def three_way() -> bool:
            consumer.poll(0.1)
            sides = [
                {tp.partition for tp in consumer.assignment()},
                http_member.owned,
                second.owned,
            ]
            disjoint_and_complete = sum(map(len, sides)) == PARTITIONS == len(set().union(*sides))
            # The uniform assignor's target is two each: librdkafka gave one up.
            return disjoint_and_complete and [len(side) for side in sides] == [2, 2, 2]

        wait_for("three members to split the partitions", three_way)
        second.leave()
        assert second.error is None
    finally:
        consumer.close()  # leaves the group (epoch -1)
    # The HTTP member gets everything back once librdkafka left.
    wait_for("the HTTP member to own every partition again", lambda: len(http_member.owned) == 6)
    http_member.leave()
    assert http_member.error is None
    # It spoke KIP-848 and fetched by topic id (Fetch v13+ names topics by id).
    sent = dict(re.findall(r"Sent (\w+)Request \(v(\d+)", "\n".join(logs)))
    assert "ConsumerGroupHeartbeat" in sent, sent
    assert int(sent["Fetch"]) >= 13, sent
    assert int(sent["OffsetCommit"]) == 9, sent


def test_consumer_group_describe_through_the_admin_client(broker: KafkaBroker) -> None:
    topic, group = _topic(broker, partitions=2), f"desc-{uuid.uuid4().hex[:8]}"
    consumer = _consumer(broker, group)
    consumer.subscribe([topic])
    try:
        wait_for(
            "an assignment",
            lambda: consumer.poll(0.1) is None and len(consumer.assignment()) == 2,
        )
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        (described,) = (
            f.result(timeout=30)
            for f in admin.describe_consumer_groups([group], request_timeout=20).values()
        )
        assert described.type == ConsumerGroupType.CONSUMER
        (member,) = described.members
        assert sorted(tp.partition for tp in member.assignment.topic_partitions) == [0, 1]
        assert {tp.topic for tp in member.assignment.topic_partitions} == {topic}
    finally:
        consumer.close()


def heartbeat(broker: KafkaBroker, **fields: Any) -> ConsumerGroupHeartbeatResponse:
    values: dict[str, Any] = {
        "member_id": "",
        "member_epoch": 0,
        "subscribed_topic_names": None,
        "topic_partitions": None,
        **fields,
    }
    request = ConsumerGroupHeartbeatRequest(**values)
    response: ConsumerGroupHeartbeatResponse = kio_call(
        broker, request, ConsumerGroupHeartbeatResponse
    )
    return response


def join(
    broker: KafkaBroker, group: str, member: str, topic: str
) -> ConsumerGroupHeartbeatResponse:
    """``member``'s first heartbeat: it joins ``group`` subscribed to ``topic`` by name,
    owning no partitions."""
    return heartbeat(
        broker,
        group_id=group,
        member_id=member,
        subscribed_topic_names=(topic,),
        topic_partitions=(),
    )


def test_heartbeat_answers_and_errors(broker: KafkaBroker) -> None:
    topic, group = _topic(broker, partitions=3), f"err-{uuid.uuid4().hex[:8]}"
    topic_id = _topic_id(broker, topic)
    member = uuid.uuid4().hex

    # v1 members make their own ids (KIP-1082).
    refused = heartbeat(broker, group_id=group, subscribed_topic_names=(topic,))
    assert refused.error_code == ErrorCode.invalid_request
    # An assignor the coordinator does not have.
    refused = heartbeat(
        broker,
        group_id=group,
        member_id=member,
        subscribed_topic_names=(topic,),
        server_assignor="sticky",
    )
    assert refused.error_code == ErrorCode.unsupported_assignor

    joined = join(broker, group, member, topic)
    assert (joined.error_code, joined.member_id, joined.member_epoch) == (ErrorCode.none, member, 1)
    assert joined.heartbeat_interval == datetime.timedelta(milliseconds=300)
    assert joined.assignment is not None
    assert [(t.topic_id, t.partitions) for t in joined.assignment.topic_partitions] == [
        (topic_id, (0, 1, 2))
    ]
    # Owned partitions are reported by topic id; an unknown id is left out.
    again = heartbeat(
        broker,
        group_id=group,
        member_id=member,
        member_epoch=1,
        topic_partitions=(
            TopicPartitions(topic_id=topic_id, partitions=(0, 1, 2)),  # type: ignore[arg-type]
            TopicPartitions(topic_id=uuid.uuid4(), partitions=(0,)),  # type: ignore[arg-type]
        ),
    )
    assert (again.error_code, again.member_epoch) == (ErrorCode.none, 1)

    # A wrong epoch is fenced; an unknown member is unknown.
    fenced = heartbeat(broker, group_id=group, member_id=member, member_epoch=7)
    assert (fenced.error_code, fenced.member_epoch) == (ErrorCode.fenced_member_epoch, -1)
    assert fenced.error_message
    unknown = heartbeat(broker, group_id=group, member_id="nobody", member_epoch=1)
    assert unknown.error_code == ErrorCode.unknown_member_id

    # OffsetCommit v9 checks the member epoch: an older one is STALE_MEMBER_EPOCH.
    def commit(epoch: int) -> ErrorCode:
        request = OffsetCommitRequest(
            group_id=group,  # type: ignore[arg-type]
            generation_id_or_member_epoch=epoch,  # type: ignore[arg-type]
            member_id=member,
            group_instance_id=None,
            topics=(
                OffsetCommitRequestTopic(
                    name=topic,  # type: ignore[arg-type]
                    partitions=(
                        OffsetCommitRequestPartition(
                            partition_index=0,  # type: ignore[arg-type]
                            committed_offset=5,  # type: ignore[arg-type]
                            committed_metadata=None,
                        ),
                    ),
                ),
            ),
        )
        answer = kio_call(broker, request, OffsetCommitResponse)
        return ErrorCode(answer.topics[0].partitions[0].error_code)

    assert commit(0) == ErrorCode.stale_member_epoch
    assert commit(1) == ErrorCode.none

    # v0: the coordinator makes the id; leaving answers epoch -1 and no assignment.
    request_v0 = HeartbeatV0(
        group_id=group,  # type: ignore[arg-type]
        member_id="",
        member_epoch=0,  # type: ignore[arg-type]
        subscribed_topic_names=(topic,),  # type: ignore[arg-type]
        topic_partitions=(),
    )
    joined_v0 = kio_call(broker, request_v0, HeartbeatResponseV0)
    assert joined_v0.error_code == ErrorCode.none and joined_v0.member_id
    left = heartbeat(broker, group_id=group, member_id=member, member_epoch=-1)
    assert (left.error_code, left.member_epoch, left.assignment) == (ErrorCode.none, -1, None)

    # ConsumerGroupDescribe: the group by topic id and name; unknown groups not found.
    described = kio_call(
        broker,
        ConsumerGroupDescribeRequest(
            group_ids=(group, "no-such-group"),  # type: ignore[arg-type]
            include_authorized_operations=False,
        ),
        ConsumerGroupDescribeResponse,
    )
    found, missing = described.groups
    # Epochs: the first join, the v0 join, the leave.
    assert (found.error_code, found.group_epoch) == (ErrorCode.none, 3)
    (only,) = found.members
    assert only.member_id == joined_v0.member_id and only.member_type == 1
    assert [(t.topic_id, t.topic_name) for t in only.target_assignment.topic_partitions] == [
        (topic_id, topic)
    ]
    assert missing.error_code == ErrorCode.group_id_not_found


def test_a_regex_re2_refuses_is_invalid_regular_expression(broker: KafkaBroker) -> None:
    """ConsumerGroupHeartbeat v1 with a subscribed_topic_regex RE2 cannot compile (an
    unclosed group, a backreference, lookaround) is INVALID_REGULAR_EXPRESSION, Kafka's
    v1 code for it, not INVALID_REQUEST; the group gains no member."""
    group = f"re-{uuid.uuid4().hex[:8]}"
    for regex in ("(", "(a)\\1", "a(?=b)", "[z-a]"):
        refused = heartbeat(
            broker,
            group_id=group,
            member_id=uuid.uuid4().hex,
            subscribed_topic_regex=regex,
            topic_partitions=(),
        )
        assert refused.error_code == ErrorCode.invalid_regular_expression, regex
        assert refused.error_message and "subscribed_topic_regex" in refused.error_message
        assert (refused.member_id, refused.assignment) == (None, None)
    # A valid one joins.
    joined = heartbeat(
        broker,
        group_id=group,
        member_id=uuid.uuid4().hex,
        subscribed_topic_regex="re-never-.*",
        topic_partitions=(),
    )
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)


def test_heartbeats_kafka_refuses_whatever_the_group_are_invalid_request(
    broker: KafkaBroker,
) -> None:
    """What Kafka's coordinator refuses before it looks at the group is INVALID_REQUEST
    (it was: INVALID_GROUP_ID for a group named "", joins with instance or rack id "" or
    reporting owned partitions accepted, UNKNOWN_MEMBER_ID for an empty member id, a
    dynamic member's -2 taken as leaving the group)."""
    topic, group = _topic(broker, partitions=1), f"inv-{uuid.uuid4().hex[:8]}"
    topic_id = _topic_id(broker, topic)
    member = uuid.uuid4().hex
    joined = join(broker, group, member, topic)
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)
    owned = (TopicPartitions(topic_id=topic_id, partitions=(0,)),)  # type: ignore[arg-type]
    cases: list[dict[str, Any]] = [
        {"group_id": "", "member_id": member, "subscribed_topic_names": (topic,)},
        {
            "group_id": group,
            "member_id": uuid.uuid4().hex,
            "instance_id": "",
            "subscribed_topic_names": (topic,),
            "topic_partitions": (),
        },
        {
            "group_id": group,
            "member_id": uuid.uuid4().hex,
            "rack_id": "",
            "subscribed_topic_names": (topic,),
            "topic_partitions": (),
        },
        {
            "group_id": group,
            "member_id": uuid.uuid4().hex,
            "subscribed_topic_names": (topic,),
            "topic_partitions": owned,
        },
        {"group_id": group, "member_id": "", "member_epoch": 1},
        {"group_id": group, "member_id": member, "member_epoch": -2},
        {"group_id": group, "member_id": member, "member_epoch": -3},
    ]
    for fields in cases:
        refused = heartbeat(broker, **fields)
        assert refused.error_code == ErrorCode.invalid_request, fields
        assert refused.error_message, fields
    # The member is still in the group, at its epoch (the -2 did not take it out).
    again = heartbeat(broker, group_id=group, member_id=member, member_epoch=1)
    assert (again.error_code, again.member_epoch) == (ErrorCode.none, 1)


def test_offset_fetch_v8_to_v10_and_offset_commit_v10(broker: KafkaBroker) -> None:
    """OffsetCommit v10 and OffsetFetch v10 name topics by id (an id naming no topic:
    UNKNOWN_TOPIC_ID for its partitions, the rest answered); OffsetFetch v8+ answers
    several groups, each with its own error; v9 checks a consumer group member's id and
    epoch as Kafka's validateOffsetFetch does (and nothing for an admin's fetch)."""
    from kio.schema.offset_commit.v10.request import (
        OffsetCommitRequest as CommitV10,
    )
    from kio.schema.offset_commit.v10.request import (
        OffsetCommitRequestPartition as CommitPartitionV10,
    )
    from kio.schema.offset_commit.v10.request import (
        OffsetCommitRequestTopic as CommitTopicV10,
    )
    from kio.schema.offset_commit.v10.response import OffsetCommitResponse as CommitAnswerV10
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequest as FetchV8
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequestGroup as GroupV8
    from kio.schema.offset_fetch.v8.request import OffsetFetchRequestTopics as TopicsV8
    from kio.schema.offset_fetch.v8.response import OffsetFetchResponse as FetchAnswerV8
    from kio.schema.offset_fetch.v9.request import OffsetFetchRequest as FetchV9
    from kio.schema.offset_fetch.v9.request import OffsetFetchRequestGroup as GroupV9
    from kio.schema.offset_fetch.v9.response import OffsetFetchResponse as FetchAnswerV9
    from kio.schema.offset_fetch.v10.request import OffsetFetchRequest as FetchV10
    from kio.schema.offset_fetch.v10.request import OffsetFetchRequestGroup as GroupV10
    from kio.schema.offset_fetch.v10.request import OffsetFetchRequestTopics as TopicsV10
    from kio.schema.offset_fetch.v10.response import OffsetFetchResponse as FetchAnswerV10

    topic, group = _topic(broker, partitions=2), f"of-{uuid.uuid4().hex[:8]}"
    topic_id, nowhere = _topic_id(broker, topic), uuid.uuid4()
    member = uuid.uuid4().hex
    joined = join(broker, group, member, topic)
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.none, 1)

    committed = kio_call(
        broker,
        CommitV10(
            group_id=group,  # type: ignore[arg-type]
            generation_id_or_member_epoch=1,  # type: ignore[arg-type]
            member_id=member,
            group_instance_id=None,
            topics=tuple(
                CommitTopicV10(
                    topic_id=tid,
                    partitions=(
                        CommitPartitionV10(
                            partition_index=0,  # type: ignore[arg-type]
                            committed_offset=5,  # type: ignore[arg-type]
                            committed_leader_epoch=-1,  # type: ignore[arg-type]
                            committed_metadata="m",
                        ),
                    ),
                )
                for tid in (topic_id, nowhere)
            ),
        ),
        CommitAnswerV10,
    )
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in committed.topics] == [
        (topic_id, [ErrorCode.none]),
        (nowhere, [ErrorCode.unknown_topic_id]),
    ]
    stored = httpx.get(f"{broker.url}/groups/{group}/offsets", timeout=30).json()["offsets"]
    assert [(o["topic"], o["partition"], o["offset"]) for o in stored] == [(topic, 0, 5)]

    def offsets(topics: Any) -> list[tuple[Any, list[tuple[int, int, ErrorCode]]]]:
        return [
            (
                getattr(t, "topic_id", None) or getattr(t, "name", None),
                [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions],
            )
            for t in topics
        ]

    # v10 by id, as the member (its id and epoch), and an unknown group beside it.
    other = f"of-none-{uuid.uuid4().hex[:8]}"
    fetched = kio_call(
        broker,
        FetchV10(
            groups=(
                GroupV10(
                    group_id=group,  # type: ignore[arg-type]
                    member_id=member,
                    member_epoch=1,  # type: ignore[arg-type]
                    topics=(
                        TopicsV10(topic_id=topic_id, partition_indexes=(0, 1)),  # type: ignore[arg-type]
                        TopicsV10(topic_id=nowhere, partition_indexes=(0,)),  # type: ignore[arg-type]
                    ),
                ),
                GroupV10(group_id=other, topics=None),  # type: ignore[arg-type]
            ),
            require_stable=False,
        ),
        FetchAnswerV10,
    )
    mine, unknown = fetched.groups
    assert (mine.group_id, mine.error_code) == (group, ErrorCode.none)
    assert offsets(mine.topics) == [
        (topic_id, [(0, 5, ErrorCode.none), (1, -1, ErrorCode.none)]),
        (nowhere, [(0, -1, ErrorCode.unknown_topic_id)]),
    ]
    assert (unknown.group_id, unknown.error_code, unknown.topics) == (other, ErrorCode.none, ())

    # v9's member check: another epoch is STALE_MEMBER_EPOCH (older or newer, as Kafka's
    # fetch check), an id not in the group UNKNOWN_MEMBER_ID; an admin's fetch (no id,
    # epoch -1) is answered.
    def as_member(member_id: str | None, epoch: int) -> ErrorCode:
        (answer,) = kio_call(
            broker,
            FetchV9(
                groups=(
                    GroupV9(
                        group_id=group,  # type: ignore[arg-type]
                        member_id=member_id,
                        member_epoch=epoch,  # type: ignore[arg-type]
                        topics=None,
                    ),
                ),
                require_stable=False,
            ),
            FetchAnswerV9,
        ).groups
        code: ErrorCode = answer.error_code
        return code

    assert as_member(member, 1) == ErrorCode.none
    assert as_member(member, 0) == ErrorCode.stale_member_epoch
    assert as_member(member, 2) == ErrorCode.stale_member_epoch
    assert as_member(uuid.uuid4().hex, 1) == ErrorCode.unknown_member_id
    assert as_member(None, -1) == ErrorCode.none

    # v8: several groups by name, each answered on its own.
    answer = kio_call(
        broker,
        FetchV8(
            groups=(
                GroupV8(group_id=group, topics=(TopicsV8(name=topic, partition_indexes=(0,)),)),  # type: ignore[arg-type]
                GroupV8(group_id=other, topics=(TopicsV8(name=topic, partition_indexes=(0,)),)),  # type: ignore[arg-type]
            ),
            require_stable=False,
        ),
        FetchAnswerV8,
    )
    assert [(g.group_id, g.error_code, offsets(g.topics)) for g in answer.groups] == [
        (group, ErrorCode.none, [(topic, [(0, 5, ErrorCode.none)])]),
        (other, ErrorCode.none, [(topic, [(0, -1, ErrorCode.none)])]),
    ]
