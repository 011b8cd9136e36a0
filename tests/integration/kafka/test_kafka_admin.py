"""Admin APIs through the Kafka door (confluent-kafka's and kafka-python's admin clients,
and kio for what they do not send), each visible through HTTP: topics created or deleted
over either door, configs as HTTP shows them, log dirs."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka_harness import KafkaBroker, kio_call
from kio.schema.create_topics.v7.request import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicsRequest,
)
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.errors import ErrorCode


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _http_topics(broker: KafkaBroker) -> set[str]:
    return {t["name"] for t in httpx.get(f"{broker.url}/topics", timeout=30).json()["topics"]}


def _outcomes(futures: dict[Any, Any]) -> dict[Any, Any]:
    """Each future's error code (confluent's KafkaError code), None for success."""
    out = {}
    for key, future in futures.items():
        try:
            future.result()
            out[key] = None
        except Exception as exc:  # the admin client raises KafkaException
            out[key] = exc.args[0].code()
    return out


@pytest.fixture
def admin(kafka_broker: KafkaBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_broker.bootstrap})


@pytest.fixture
def kp_admin(kafka_broker: KafkaBroker) -> Iterator[Any]:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    yield client
    client.close()


def test_create_describe_and_delete_topics_with_librdkafka(
    kafka_broker: KafkaBroker, admin: AdminClient
) -> None:
    made, checked, wide, bad = _name("adm"), _name("adm-v"), _name("adm-rf"), _name("adm-c")
    assert _outcomes(
        admin.create_topics(
            [
                NewTopic(
                    made, 3, 1, config={"retention.ms": "3600000", "cleanup.policy": "compact"}
                ),
                NewTopic(wide, 1, 2),  # one broker
                NewTopic(bad, 1, 1, config={"no.such.config": "1"}),
            ],
            operation_timeout=30,
        )
    ) == {
        made: None,
        wide: KafkaError.INVALID_REPLICATION_FACTOR,
        bad: KafkaError.INVALID_CONFIG,
    }
    assert _outcomes(admin.create_topics([NewTopic(checked, 2, 1)], validate_only=True)) == {
        checked: None
    }
    assert _outcomes(admin.create_topics([NewTopic(made, 1, 1)])) == {
        made: KafkaError.TOPIC_ALREADY_EXISTS
    }
    topics = _http_topics(kafka_broker)
    assert made in topics and not {checked, wide, bad} & topics

    # HTTP describes what the door created; the door describes what HTTP shows.
    described = httpx.get(f"{kafka_broker.url}/topics/{made}", timeout=30).json()
    assert len(described["partitions"]) == 3
    assert described["config_overrides"] == {"retention.ms": 3600000, "cleanup.policy": "compact"}
    topic_res, broker_res = ConfigResource("topic", made), ConfigResource("broker", "0")
    found = {r: f.result() for r, f in admin.describe_configs([topic_res, broker_res]).items()}
    configs = found[topic_res]
    assert set(configs) == set(described["configs"])
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].value == str(described["configs"]["segment.bytes"])
    assert found[broker_res]["num.partitions"].is_read_only
    assert _outcomes(admin.describe_configs([ConfigResource("topic", _name("none"))])).popitem()[
        1
    ] == (KafkaError.UNKNOWN_TOPIC_OR_PART)

    # A topic created over HTTP is deleted over the door, and the other way round.
    other, missing = _name("adm-http"), _name("none")
    assert httpx.post(f"{kafka_broker.url}/topics", json={"name": other}).status_code == 201
    deleted = admin.delete_topics(
        [made, other, missing, "__consumer_offsets"], operation_timeout=30
    )
    assert _outcomes(deleted) == {
        made: None,
        other: None,
        missing: KafkaError.UNKNOWN_TOPIC_OR_PART,
        "__consumer_offsets": KafkaError.TOPIC_EXCEPTION,
    }
    assert not {made, other} & _http_topics(kafka_broker)


def test_kafka_python_admin_and_log_dirs(kafka_broker: KafkaBroker, kp_admin: Any) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType
    from kafka.admin import NewTopic as KNewTopic

    topic = _name("adm-kp")
    kp_admin.create_topics([KNewTopic(topic, 2, 1, topic_configs={"max.message.bytes": "65536"})])
    assert topic in _http_topics(kafka_broker)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic, b"x" * 1000, partition=1)
    assert producer.flush(30) == 0
    # Only the modified configs (kafka-python's default filter): the override.
    described = kp_admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])
    (config,) = described["topic"][topic].items()
    assert config[0] == "max.message.bytes"
    assert (config[1]["value"], config[1]["config_source"]) == ("65536", "DYNAMIC_TOPIC_CONFIG")
    (broker,) = kp_admin.describe_log_dirs(topic_partitions=None)
    (log_dir,) = broker["log_dirs"]
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    assert sizes[(topic, 0)] == 0 and sizes[(topic, 1)] > 1000
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    kp_admin.delete_topics([topic])
    assert topic not in _http_topics(kafka_broker)


def _creatable(name: str, partitions: int, *assignments: Any) -> CreatableTopic:
    return CreatableTopic(
        name=name,  # type: ignore[arg-type]
        num_partitions=partitions,  # type: ignore[arg-type]
        replication_factor=-1,  # type: ignore[arg-type]
        assignments=assignments,
        configs=(),
    )


def test_create_topics_refuses_per_topic_with_kafkas_codes(kafka_broker: KafkaBroker) -> None:
    twice, placed = _name("adm-twice"), _name("adm-placed")
    answer = kio_call(
        kafka_broker,
        CreateTopicsRequest(
            topics=(
                _creatable(twice, 1),
                _creatable(twice, 1),
                _creatable(
                    placed,
                    -1,
                    CreatableReplicaAssignment(partition_index=0, broker_ids=(0,)),  # type: ignore[arg-type]
                ),
                _creatable(_name("adm-zero"), 0),
            ),
            timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
            validate_only=False,
        ),
        CreateTopicsResponse,
    )
    assert [(t.name, t.error_code) for t in answer.topics] == [
        (twice, ErrorCode.invalid_request),
        (twice, ErrorCode.invalid_request),
        (placed, ErrorCode.invalid_request),
        (answer.topics[3].name, ErrorCode.invalid_partitions),
    ]
    assert not {twice, placed} & _http_topics(kafka_broker)


def _http_overrides(broker: KafkaBroker, topic: str) -> dict[str, Any]:
    found: dict[str, Any] = httpx.get(f"{broker.url}/topics/{topic}", timeout=30).json()
    return found["config_overrides"]


# librdkafka deprecates the legacy AlterConfigs, which this test exercises on purpose.
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_show_in_http(
    kafka_broker: KafkaBroker, admin: AdminClient, kp_admin: Any
) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType

    topic = _name("adm-alter")
    r = httpx.post(
        f"{kafka_broker.url}/topics",
        json={"name": topic, "configs": {"retention.ms": 60000, "cleanup.policy": "delete"}},
    )
    assert r.status_code == 201, r.text

    def incremental(*entries: tuple[str, str | None, AlterConfigOpType]) -> Any:
        resource = ConfigResource(
            "topic",
            topic,
            incremental_configs=[
                ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries
            ],
        )
        return _outcomes(admin.incremental_alter_configs([resource])).popitem()[1]

    assert (
        incremental(
            ("max.message.bytes", "2048", AlterConfigOpType.SET),
            ("retention.ms", None, AlterConfigOpType.DELETE),
            ("cleanup.policy", "compact", AlterConfigOpType.APPEND),
        )
        is None
    )
    assert _http_overrides(kafka_broker, topic) == {
        "max.message.bytes": 2048,
        "cleanup.policy": "compact,delete",
    }
    # The new limit holds for the next produce through any door.
    big = httpx.post(
        f"{kafka_broker.url}/topics/{topic}/partitions/0/records",
        json={"records": [{"value": "x" * 4096}], "value_format": "string"},
        timeout=30,
    )
    assert big.status_code == 413, big.text
    # Unknown names and bad values: INVALID_CONFIG, nothing changed.
    assert incremental(("no.such.config", "1", AlterConfigOpType.SET)) == KafkaError.INVALID_CONFIG
    assert incremental(("retention.ms", "soon", AlterConfigOpType.SET)) == KafkaError.INVALID_CONFIG
    assert incremental(("retention.ms", "5", AlterConfigOpType.APPEND)) == KafkaError.INVALID_CONFIG
    assert _http_overrides(kafka_broker, topic)["max.message.bytes"] == 2048

    # Legacy AlterConfigs: kafka-python sends the other overrides along (it emulates an
    # incremental change); librdkafka sends only what it is given, which replaces them.
    kp_admin.alter_configs(
        [KConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "1000"})],
        incremental=False,
    )
    assert _http_overrides(kafka_broker, topic) == {
        "max.message.bytes": 2048,
        "cleanup.policy": "compact,delete",
        "retention.ms": 1000,
    }
    replaced = ConfigResource("topic", topic, set_config={"segment.ms": "99"})
    assert _outcomes(admin.alter_configs([replaced], validate_only=True)) == {replaced: None}
    assert _http_overrides(kafka_broker, topic)["retention.ms"] == 1000
    assert _outcomes(admin.alter_configs([replaced])) == {replaced: None}
    assert _http_overrides(kafka_broker, topic) == {"segment.ms": 99}
    # The broker's own configs are read-only; an unknown topic is named.
    broker = ConfigResource(
        "broker",
        "0",
        incremental_configs=[
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    missing = ConfigResource(
        "topic",
        _name("none"),
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    assert sorted(_outcomes(admin.incremental_alter_configs([broker, missing])).values()) == [
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError.INVALID_REQUEST,
    ]


def test_delete_records_moves_the_log_start_for_every_door(
    kafka_broker: KafkaBroker, admin: AdminClient
) -> None:
    from confluent_kafka import TopicPartition

    topic = _name("adm-del")
    with httpx.Client(base_url=kafka_broker.url, timeout=30) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 2}).status_code == 201
        r = http.post(
            f"/topics/{topic}/partitions/0/records",
            json={"records": [{"value": str(i)} for i in range(10)], "value_format": "string"},
        )
        assert r.status_code == 200, r.text
        below, beyond, whole = (
            TopicPartition(topic, 0, 6),
            TopicPartition(topic, 1, 1),  # partition 1 is empty: its high watermark is 0
            TopicPartition(topic, 0, -1),
        )
        done = admin.delete_records([below, beyond])
        assert done[below].result().low_watermark == 6
        assert _outcomes({beyond: done[beyond]}) == {beyond: KafkaError.OFFSET_OUT_OF_RANGE}
        described = http.get(f"/topics/{topic}").json()["partitions"][0]
        assert (described["log_start_offset"], described["high_watermark"]) == (6, 10)
        gone = http.get(f"/topics/{topic}/partitions/0/records", params={"offset": 2})
        assert gone.status_code == 416 and gone.json()["error_code"] == "OFFSET_OUT_OF_RANGE"
        kept = http.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": 6, "value_format": "string"},
        ).json()
        assert [rec["value"] for rec in kept["records"] if rec["offset"] >= 6] == [
            "6",
            "7",
            "8",
            "9",
        ]
        assert admin.delete_records([whole])[whole].result().low_watermark == 10
        # A compacted-only topic's records are not deleted (Kafka's POLICY_VIOLATION), on
        # either door; with delete in its policy they are.
        compacted = _name("adm-del-compact")
        made = http.post(
            "/topics",
            json={"name": compacted, "partitions": 1, "configs": {"cleanup.policy": "compact"}},
        )
        assert made.status_code == 201, made.text
        r = http.post(
            f"/topics/{compacted}/partitions/0/records",
            json={"records": [{"key": "k", "value": str(i)} for i in range(4)]},
        )
        assert r.status_code == 200, r.text
        refused = TopicPartition(compacted, 0, 2)
        assert _outcomes(admin.delete_records([refused])) == {refused: KafkaError.POLICY_VIOLATION}
        answer = http.delete(f"/topics/{compacted}/partitions/0/records", params={"before": 2})
        assert answer.status_code == 400 and answer.json()["error_code"] == "POLICY_VIOLATION"
        assert http.get(f"/topics/{compacted}").json()["partitions"][0]["log_start_offset"] == 0


def test_create_partitions_grows_a_topic_seen_over_http(
    kafka_broker: KafkaBroker, admin: AdminClient
) -> None:
    from confluent_kafka.admin import NewPartitions

    topic = _name("adm-grow")
    assert _outcomes(admin.create_topics([NewTopic(topic, 1, 1)])) == {topic: None}
    assert _outcomes(admin.create_partitions([NewPartitions(topic, 3)], validate_only=True)) == {
        topic: None
    }
    assert len(httpx.get(f"{kafka_broker.url}/topics/{topic}").json()["partitions"]) == 1
    assert _outcomes(admin.create_partitions([NewPartitions(topic, 3)])) == {topic: None}
    assert len(httpx.get(f"{kafka_broker.url}/topics/{topic}").json()["partitions"]) == 3
    missing = _name("none")
    assert _outcomes(
        admin.create_partitions([NewPartitions(topic, 2), NewPartitions(missing, 2)])
    ) == {
        topic: KafkaError.INVALID_PARTITIONS,
        missing: KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
    # The new partition takes records through the Kafka door and serves them over HTTP.
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic, b"in-2", partition=2)
    assert producer.flush(30) == 0
    r = httpx.get(
        f"{kafka_broker.url}/topics/{topic}/partitions/2/records",
        params={"offset": 0, "value_format": "string"},
        timeout=30,
    )
    assert [rec["value"] for rec in r.json()["records"]] == ["in-2"]


def test_acl_apis_without_an_authorizer_answer_security_disabled(
    kafka_broker: KafkaBroker,
) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest
    from kio.schema.describe_acls.v3.response import DescribeAclsResponse

    binding = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:a", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    with pytest.raises(KafkaException) as refused:
        admin.create_acls([binding], request_timeout=30)[binding].result()
    assert refused.value.args[0].code() == KafkaError.SECURITY_DISABLED
    answer = kio_call(
        kafka_broker,
        DescribeAclsRequest(
            resource_type_filter=1,  # type: ignore[arg-type]
            resource_name_filter=None,
            pattern_type_filter=1,  # type: ignore[arg-type]
            principal_filter=None,
            host_filter=None,
            operation=1,  # type: ignore[arg-type]
            permission_type=1,  # type: ignore[arg-type]
        ),
        DescribeAclsResponse,
    )
    assert answer.error_code == ErrorCode.security_disabled
    assert answer.error_message and "authorizer=acl" in answer.error_message
