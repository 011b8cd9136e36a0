"""ACLs on the Kafka door: the authorizer HTTP uses (one ACL store, the same super users),
checked per API as Kafka's authorizer table says (app/kafka/authorize.py). One broker for
the module: SASL_PLAINTEXT beside HTTP Basic, ``authorizer=acl``, ``User:admin`` super."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kafka_harness import (
    KafkaBroker,
    admin_http,
    kafka_conf,
    login,
    sasl_acl_broker,
    scram_admin,
    start_broker,
    stop_broker,
)


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    yield from sasl_acl_broker(
        tmp_path_factory.mktemp("kafka-acl"),
        # Three per request (the other tests send at most three): the cap's test sends four.
        ("LOGBUS_KAFKA_ACL_MAX_CHANGES_PER_REQUEST", "3"),
    )


def grant(broker: KafkaBroker, topic: str, operation: str) -> None:
    with admin_http(broker) as http:
        acl = {
            "resource_type": "TOPIC",
            "resource_name": topic,
            "principal": "User:reader",
            "operation": operation,
        }
        assert http.post("/acls", json={"acls": [acl]}).status_code == 201


def produce_one(broker: KafkaBroker, user: str, topic: str) -> KafkaError | None:
    outcome: list[KafkaError | None] = []
    producer = Producer(
        {**kafka_conf(broker, user), "enable.idempotence": False, "message.send.max.retries": 0}
    )
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert len(outcome) == 1
    return outcome[0]


def test_read_but_not_write_cannot_produce_until_an_http_acl_grants_it(
    acl_broker: KafkaBroker,
) -> None:
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    grant(acl_broker, topic, "READ")
    refused = produce_one(acl_broker, "reader", topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "DENIED principal=User:reader" in acl_broker.log()
    grant(acl_broker, topic, "WRITE")  # over HTTP: holds on the Kafka door at once
    assert produce_one(acl_broker, "reader", topic) is None
    assert produce_one(acl_broker, "admin", topic) is None  # a super user


def test_metadata_leaves_out_topics_the_user_may_not_describe(acl_broker: KafkaBroker) -> None:
    mine, secret = f"mine-{uuid.uuid4().hex[:8]}", f"secret-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        for name in (mine, secret):
            assert http.post("/topics", json={"name": name, "partitions": 1}).status_code == 201
    grant(acl_broker, mine, "DESCRIBE")
    seen = set(AdminClient(kafka_conf(acl_broker, "reader")).list_topics(timeout=10).topics)
    assert mine in seen and secret not in seen
    everything = set(AdminClient(kafka_conf(acl_broker, "admin")).list_topics(timeout=10).topics)
    assert {mine, secret} <= everything
    named = AdminClient(kafka_conf(acl_broker, "reader")).list_topics(secret, timeout=10)
    error = named.topics[secret].error
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """An SSL Kafka listener that asks for client certificates; ``admin``'s certificate
    subject is a super user, ``other``'s is granted nothing."""
    import trustme
    from cryptography import x509

    tmp = tmp_path_factory.mktemp("kafka-mtls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    server = ca.issue_cert("127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(tmp / "server.pem"))
    server.private_key_pem.write_to_path(str(tmp / "server.key"))
    subjects = {}
    for name in ("admin", "other"):
        leaf = ca.issue_cert(common_name=f"{name}-client")
        leaf.cert_chain_pems[0].write_to_path(str(tmp / f"{name}.pem"))
        leaf.private_key_pem.write_to_path(str(tmp / f"{name}.key"))
        cert = x509.load_pem_x509_certificate(leaf.cert_chain_pems[0].bytes())
        subjects[name] = f"User:{cert.subject.rfc4514_string()}"
    broker = start_broker(
        tmp,
        ("LOGBUS_AUTHORIZER", "acl"),
        ("LOGBUS_SUPER_USERS", subjects["admin"]),
        ("LOGBUS_KAFKA_SECURITY_PROTOCOL", "SSL"),
        ("LOGBUS_SSL_CERTFILE", str(tmp / "server.pem")),
        ("LOGBUS_SSL_KEYFILE", str(tmp / "server.key")),
        ("LOGBUS_SSL_CA_FILE", str(tmp / "ca.pem")),
        ("LOGBUS_SSL_CLIENT_AUTH", "requested"),
        tls_ca=tmp / "ca.pem",
    )
    yield {"broker": broker, "dir": tmp, "subjects": subjects}
    stop_broker(broker)


def test_a_client_certificate_subject_is_the_principal(mtls_broker: dict[str, Any]) -> None:
    from confluent_kafka.admin import NewTopic

    broker: KafkaBroker = mtls_broker["broker"]
    tmp = mtls_broker["dir"]

    def conf(name: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(tmp / "ca.pem"),
            "ssl.certificate.location": str(tmp / f"{name}.pem"),
            "ssl.key.location": str(tmp / f"{name}.key"),
        }

    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(conf("admin"))  # kept: a collected client cancels its futures
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    outcome: list[KafkaError | None] = []
    for name in ("admin", "other"):
        producer = Producer({**conf(name), "message.send.max.retries": 0})
        producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(30)
    assert outcome[0] is None
    refused = outcome[1]
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert f"DENIED principal={mtls_broker['subjects']['other']}" in broker.log()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_group_needs_read_on_the_group(acl_broker: KafkaBroker, protocol: str) -> None:
    """Both group protocols: JoinGroup (classic) and KIP-848's ConsumerGroupHeartbeat."""
    from confluent_kafka import Consumer

    topic, group = f"grp-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    assert produce_one(acl_broker, "admin", topic) is None
    grant(acl_broker, topic, "READ")

    def consume() -> KafkaError | bytes:
        consumer = Consumer(
            {
                **kafka_conf(acl_broker, "reader"),
                "group.id": group,
                "group.protocol": protocol,
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([topic])
        try:
            for _ in range(60):
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                error = msg.error()
                return error if error is not None else bytes(msg.value())
            raise AssertionError("neither a record nor an error")
        finally:
            consumer.close()

    refused = consume()
    assert isinstance(refused, KafkaError)
    assert refused.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    with admin_http(acl_broker) as http:
        acl = {
            "resource_type": "GROUP",
            "resource_name": group,
            "principal": "User:reader",
            "operation": "READ",
        }
        assert http.post("/acls", json={"acls": [acl]}).status_code == 201
    assert consume() == b"x"


def test_acl_apis_share_the_http_acl_store(acl_broker: KafkaBroker) -> None:
    """CreateAcls, DescribeAcls and DeleteAcls through confluent-kafka's AdminClient: what
    they write holds on both doors and is what ``/acls`` shows, and the other way round."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    topic, prefix = f"kacl-{uuid.uuid4().hex[:8]}", f"kpre-{uuid.uuid4().hex[:6]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    admin = AdminClient(kafka_conf(acl_broker, "admin"))
    allow = AclPermissionType.ALLOW
    write = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:reader", "*",
        AclOperation.WRITE, allow,
    )  # fmt: skip
    prefixed = AclBinding(
        ResourceType.GROUP, prefix, ResourcePatternType.PREFIXED, "User:reader", "*",
        AclOperation.READ, allow,
    )  # fmt: skip
    # IDEMPOTENT_WRITE is a cluster operation: refused on a topic, alone.
    wrong = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:reader", "*",
        AclOperation.IDEMPOTENT_WRITE, allow,
    )  # fmt: skip
    assert produce_one(acl_broker, "reader", topic) is not None
    results = admin.create_acls([write, prefixed, wrong], request_timeout=30)
    assert results[write].result() is None and results[prefixed].result() is None
    with pytest.raises(KafkaException) as refused:
        results[wrong].result()
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "does not apply" in refused.value.args[0].str()
    # Holds on the Kafka door, and HTTP lists it.
    assert produce_one(acl_broker, "reader", topic) is None
    with admin_http(acl_broker) as http:
        listed = http.get("/acls", params={"principal": "User:reader"}).json()["acls"]
        assert {(a["resource_name"], a["pattern_type"], a["operation"]) for a in listed} >= {
            (topic, "LITERAL", "WRITE"),
            (prefix, "PREFIXED", "READ"),
        }
        # An ACL added over HTTP is described through the Kafka door; MATCH finds every
        # binding that applies to a group name under the prefix.
        acl = {
            "resource_type": "GROUP",
            "resource_name": f"{prefix}-a",
            "principal": "User:reader",
            "operation": "DESCRIBE",
        }
        assert http.post("/acls", json={"acls": [acl]}).status_code == 201
    match = AclBindingFilter(
        ResourceType.GROUP, f"{prefix}-a", ResourcePatternType.MATCH, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    found = admin.describe_acls(match, request_timeout=30).result()
    assert {(b.name, b.resource_pattern_type, b.operation) for b in found} == {
        (prefix, ResourcePatternType.PREFIXED, AclOperation.READ),
        (f"{prefix}-a", ResourcePatternType.LITERAL, AclOperation.DESCRIBE),
    }
    # DeleteAcls: the topic's WRITE goes, on both doors at once.
    topic_filter = AclBindingFilter(
        ResourceType.TOPIC, topic, ResourcePatternType.ANY, None, None,
        AclOperation.WRITE, AclPermissionType.ANY,
    )  # fmt: skip
    deleted = admin.delete_acls([topic_filter], request_timeout=30)[topic_filter].result()
    assert [(b.name, b.operation) for b in deleted] == [(topic, AclOperation.WRITE)]
    with admin_http(acl_broker) as http:
        assert http.get("/acls", params={"resource_name": topic}).json()["acls"] == []
    failed = produce_one(acl_broker, "reader", topic)
    assert failed is not None and failed.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # Without ALTER (DESCRIBE) on the cluster, reader may neither change nor list ACLs.
    reader = AdminClient(kafka_conf(acl_broker, "reader"))
    with pytest.raises(KafkaException) as denied:
        reader.create_acls([write], request_timeout=30)[write].result()
    assert denied.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # librdkafka drops DescribeAcls' top-level error code (an empty list either way);
    # kafka-python's client reads it (the next test).
    assert reader.describe_acls(match, request_timeout=30).result() == []
    denial = "DENIED principal=User:reader host=127.0.0.1 operation=DESCRIBE resource=CLUSTER"
    assert denial in acl_broker.log()


def test_acl_kinds_logbus_does_not_keep_are_named_in_the_answer(acl_broker: KafkaBroker) -> None:
    """kafka-python's admin client, which knows Kafka's USER resources and token operations
    and reads DescribeAcls' error code."""
    from kafka.admin._acls import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )
    from kafka.errors import ClusterAuthorizationFailedError, InvalidRequestError, NoError

    admin, reader = scram_admin(acl_broker, "admin"), scram_admin(acl_broker, "reader")
    try:
        user_acl = ACL(
            "User:reader",
            "*",
            ACLOperation.CREATE_TOKENS,
            ACLPermissionType.ALLOW,
            ResourcePattern(ResourceType.USER, "bob", ACLResourcePatternType.LITERAL),
        )
        outcome = admin.create_acls([user_acl])
        assert outcome["succeeded"] == []
        assert outcome["failed"] == [InvalidRequestError]  # this client keeps no message
        users = ACLFilter(
            None,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.USER, None, ACLResourcePatternType.ANY),
        )
        assert admin.describe_acls(users) == ([], NoError)  # there are none
        with pytest.raises(ClusterAuthorizationFailedError):
            reader.describe_acls(users)
    finally:
        admin.close()
        reader.close()


def test_topics_named_by_id_are_authorized_without_revealing_names(acl_broker: KafkaBroker) -> None:
    """Metadata v12, Fetch v16 and DeleteTopics v6 naming a topic by id: a principal
    without DESCRIBE/READ/DELETE is refused per topic, and the name is not answered."""
    import datetime

    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
    from kio.schema.delete_topics.v6.response import DeleteTopicsResponse
    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v16.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.fetch.v16.response import FetchResponse
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v12.response import MetadataResponse

    def by_id(wire: Any, topic_id: Any) -> Any:
        request = MetadataRequest(
            topics=(MetadataRequestTopic(topic_id=topic_id, name=None),),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        (answer,) = wire.call(request, MetadataResponse).topics
        return answer

    topic = f"ids-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    admin = login(acl_broker, "admin")
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),),  # type: ignore[arg-type]
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    (named,) = admin.call(request, MetadataResponse).topics
    topic_id = named.topic_id
    assert topic_id is not None
    assert by_id(admin, topic_id).name == topic

    reader = login(acl_broker, "reader")
    refused = by_id(reader, topic_id)
    assert (refused.error_code, refused.name) == (ErrorCode.topic_authorization_failed, None)
    fetch = FetchRequest(
        max_wait=datetime.timedelta(0),  # type: ignore[arg-type]
        min_bytes=1,  # type: ignore[arg-type]
        topics=(
            FetchTopic(
                topic_id=topic_id,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024),  # type: ignore[arg-type]
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    fetched = reader.call(fetch, FetchResponse)
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    deleted = reader.call(
        DeleteTopicsRequest(
            topics=(DeleteTopicState(name=None, topic_id=topic_id),),
            timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
        ),
        DeleteTopicsResponse,
    )
    (result,) = deleted.responses
    assert (result.error_code, result.name) == (ErrorCode.topic_authorization_failed, None)
    with admin_http(acl_broker) as http:
        assert http.get(f"/topics/{topic}").status_code == 200


def test_kip848_groups_do_not_reveal_topics_the_principal_may_not_describe(
    acl_broker: KafkaBroker,
) -> None:
    """ConsumerGroupHeartbeat subscribing by name to a topic the principal may not
    DESCRIBE is TOPIC_AUTHORIZATION_FAILED (else its assignment tells the topic exists,
    its id and partitions), and ConsumerGroupDescribe of a group whose members name such
    a topic is TOPIC_AUTHORIZATION_FAILED without members, as Kafka answers both."""
    import datetime

    from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
    from kio.schema.consumer_group_describe.v1.response import ConsumerGroupDescribeResponse
    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest
    from kio.schema.consumer_group_heartbeat.v1.response import ConsumerGroupHeartbeatResponse
    from kio.schema.errors import ErrorCode

    secret = f"secret-{uuid.uuid4().hex[:8]}"
    group, other = f"g-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": secret, "partitions": 2}).status_code == 201
        acls = [
            {
                "resource_type": "GROUP",
                "resource_name": g,
                "principal": "User:reader",
                "operation": op,
            }
            for g, op in ((group, "READ"), (other, "DESCRIBE"))
        ]
        assert http.post("/acls", json={"acls": acls}).status_code == 201

    def join(user: str, group_id: str) -> Any:
        request = ConsumerGroupHeartbeatRequest(
            group_id=group_id,  # type: ignore[arg-type]
            member_id=uuid.uuid4().hex,
            member_epoch=0,  # type: ignore[arg-type]
            rebalance_timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
            subscribed_topic_names=(secret,),  # type: ignore[arg-type]
            topic_partitions=(),
        )
        return login(acl_broker, user).call(request, ConsumerGroupHeartbeatResponse)

    refused = join("reader", group)
    assert (refused.error_code, refused.assignment) == (ErrorCode.topic_authorization_failed, None)

    # A member that may see the topic joins the other group; the reader may describe that
    # group, not the topic its members consume.
    joined = join("admin", other)
    assert joined.error_code == ErrorCode.none
    assert joined.assignment is not None and joined.assignment.topic_partitions
    described = login(acl_broker, "reader").call(
        ConsumerGroupDescribeRequest(group_ids=(other,), include_authorized_operations=False),  # type: ignore[arg-type]
        ConsumerGroupDescribeResponse,
    )
    (answer,) = described.groups
    assert (answer.error_code, answer.members) == (ErrorCode.topic_authorization_failed, ())
    assert secret not in (answer.error_message or "")
    # Once the reader may describe the topic, the group is described.
    grant(acl_broker, secret, "DESCRIBE")
    described = login(acl_broker, "reader").call(
        ConsumerGroupDescribeRequest(group_ids=(other,), include_authorized_operations=False),  # type: ignore[arg-type]
        ConsumerGroupDescribeResponse,
    )
    (answer,) = described.groups
    assert answer.error_code == ErrorCode.none
    assert [m.subscribed_topic_names for m in answer.members] == [(secret,)]


def test_acl_changes_per_request_are_capped(acl_broker: KafkaBroker) -> None:
    """``kafka_acl_max_changes_per_request`` (3 here): four creations, or four DeleteAcls
    filters, in one request are each answered INVALID_REQUEST naming the setting, and
    nothing changes; three pass."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    name = f"kcap-{uuid.uuid4().hex[:8]}"
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            f"{name}-{i}",
            ResourcePatternType.LITERAL,
            "User:reader",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
        for i in range(4)
    ]
    admin = AdminClient(kafka_conf(acl_broker, "admin"))
    results = admin.create_acls(bindings, request_timeout=30)
    for binding in bindings:
        with pytest.raises(KafkaException) as refused:
            results[binding].result()
        error = refused.value.args[0]
        assert error.code() == KafkaError.INVALID_REQUEST
        assert "kafka_acl_max_changes_per_request (3)" in error.str()
    with admin_http(acl_broker) as http:
        listed = http.get("/acls", params={"principal": "User:reader"}).json()["acls"]
        assert not [a for a in listed if a["resource_name"].startswith(name)]
    created = admin.create_acls(bindings[:3], request_timeout=30)
    assert all(created[b].result() is None for b in bindings[:3])

    filters = [
        AclBindingFilter(
            ResourceType.TOPIC,
            f"{name}-{i}",
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        for i in range(4)
    ]
    deleted = admin.delete_acls(filters, request_timeout=30)
    for f in filters:
        with pytest.raises(KafkaException) as refused:
            deleted[f].result()
        assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    with admin_http(acl_broker) as http:
        listed = http.get("/acls", params={"principal": "User:reader"}).json()["acls"]
        assert len([a for a in listed if a["resource_name"].startswith(name)]) == 3
    gone = admin.delete_acls(filters[:3], request_timeout=30)
    assert sorted(b.name for f in filters[:3] for b in gone[f].result()) == [
        f"{name}-{i}" for i in range(3)
    ]


def _bits(*operations: int) -> int:
    return sum(1 << code for code in operations)


# Kafka's AclOperation codes.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
OMITTED = -(2**31)


def test_authorized_operations_are_answered_when_asked(acl_broker: KafkaBroker) -> None:
    """Metadata v8+, DescribeCluster, DescribeGroups v3+ and ConsumerGroupDescribe answer
    the principal's authorized operations (Kafka's bit field of AclOperation codes) when
    the request includes them, and Kafka's "omitted" when it does not."""
    import datetime

    from kio.schema.consumer_group_describe.v0.request import ConsumerGroupDescribeRequest
    from kio.schema.consumer_group_describe.v0.response import ConsumerGroupDescribeResponse
    from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
    from kio.schema.consumer_group_heartbeat.v0.response import ConsumerGroupHeartbeatResponse
    from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
    from kio.schema.describe_cluster.v0.response import DescribeClusterResponse
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.describe_groups.v5.response import DescribeGroupsResponse
    from kio.schema.errors import ErrorCode
    from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.metadata.v9.response import MetadataResponse

    topic, group = f"ops-{uuid.uuid4().hex[:8]}", f"ops-g-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
        acl = {"resource_type": "GROUP", "resource_name": group, "principal": "User:reader"}
        assert (
            http.post("/acls", json={"acls": [{**acl, "operation": "DESCRIBE"}]}).status_code == 201
        )
    grant(acl_broker, topic, "READ")
    admin, reader = login(acl_broker, "admin"), login(acl_broker, "reader")

    def metadata(wire: Any, include: bool) -> tuple[int, int]:
        answer = wire.call(
            MetadataRequest(
                topics=(MetadataRequestTopic(name=topic),),  # type: ignore[arg-type]
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=include,
                include_topic_authorized_operations=include,
            ),
            MetadataResponse,
        )
        (t,) = answer.topics
        assert t.error_code == ErrorCode.none
        return t.topic_authorized_operations, answer.cluster_authorized_operations

    every_topic_op = _bits(
        READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    )
    every_cluster_op = _bits(
        CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE
    )
    assert metadata(admin, False) == (OMITTED, OMITTED)
    assert metadata(admin, True) == (every_topic_op, every_cluster_op)  # a super user
    # READ implies DESCRIBE (Kafka's implied operations); nothing on the cluster.
    assert metadata(reader, True) == (_bits(READ, DESCRIBE), 0)

    def cluster(wire: Any, include: bool) -> int:
        answer = wire.call(
            DescribeClusterRequest(include_cluster_authorized_operations=include),
            DescribeClusterResponse,
        )
        assert answer.error_code == ErrorCode.none
        return int(answer.cluster_authorized_operations)

    assert (cluster(admin, True), cluster(reader, True), cluster(reader, False)) == (
        every_cluster_op,
        0,
        OMITTED,
    )

    # A consumer-protocol group joined by the admin: ConsumerGroupDescribe and
    # DescribeGroups both answer the reader's operations on the group (DESCRIBE only).
    joined = admin.call(
        ConsumerGroupHeartbeatRequest(
            group_id=group,  # type: ignore[arg-type]
            member_id="",
            member_epoch=0,  # type: ignore[arg-type]
            instance_id=None,
            rack_id=None,
            rebalance_timeout=datetime.timedelta(minutes=5),
            subscribed_topic_names=(topic,),  # type: ignore[arg-type]
            server_assignor=None,
            topic_partitions=(),
        ),
        ConsumerGroupHeartbeatResponse,
    )
    assert joined.error_code == ErrorCode.none

    def described(wire: Any, include: bool) -> tuple[int, int]:
        (kip848,) = wire.call(
            ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=include),  # type: ignore[arg-type]
            ConsumerGroupDescribeResponse,
        ).groups
        (classic,) = wire.call(
            DescribeGroupsRequest(groups=(group,), include_authorized_operations=include),  # type: ignore[arg-type]
            DescribeGroupsResponse,
        ).groups
        assert (kip848.error_code, classic.error_code) == (ErrorCode.none, ErrorCode.none)
        return kip848.authorized_operations, classic.authorized_operations

    assert described(reader, True) == (_bits(DESCRIBE), _bits(DESCRIBE))
    assert described(reader, False) == (OMITTED, OMITTED)
    assert described(admin, True) == (_bits(READ, DELETE, DESCRIBE),) * 2


def test_confluent_admin_client_reads_authorized_operations(acl_broker: KafkaBroker) -> None:
    """librdkafka's AdminClient asks for authorized operations and reads them back."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    topic = f"ops-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
    grant(acl_broker, topic, "WRITE")
    reader = AdminClient(kafka_conf(acl_broker, "reader"))
    futures = reader.describe_topics(
        TopicCollection([topic]), request_timeout=10, include_authorized_operations=True
    )
    description = futures[topic].result(timeout=30)
    assert set(description.authorized_operations) == {AclOperation.WRITE, AclOperation.DESCRIBE}
    admin = AdminClient(kafka_conf(acl_broker, "admin"))
    cluster = admin.describe_cluster(request_timeout=10, include_authorized_operations=True)
    assert set(cluster.result(timeout=30).authorized_operations) == {
        AclOperation.CREATE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    }


def test_describe_producers_needs_read_on_the_topic(acl_broker: KafkaBroker) -> None:
    """Kafka's table: READ topic, per partition (TOPIC_AUTHORIZATION_FAILED without it)."""
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
    from kio.schema.describe_producers.v0.response import DescribeProducersResponse
    from kio.schema.errors import ErrorCode

    topic = f"dprod-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 2}).status_code == 201
    request = DescribeProducersRequest(
        topics=(TopicRequest(name=topic, partition_indexes=(0, 1)),)  # type: ignore[arg-type]
    )

    def codes() -> list[ErrorCode]:
        answer = login(acl_broker, "reader").call(request, DescribeProducersResponse)
        return [p.error_code for p in answer.topics[0].partitions]

    grant(acl_broker, topic, "DESCRIBE")  # not enough
    assert codes() == [ErrorCode.topic_authorization_failed] * 2
    assert f"operation=READ resource=TOPIC:{topic}" in acl_broker.log()
    grant(acl_broker, topic, "READ")
    assert codes() == [ErrorCode.none] * 2


def test_transactional_batches_need_write_on_their_producers_transactional_id(
    acl_broker: KafkaBroker,
) -> None:
    """Kafka's rule (``KafkaApis.handleProduceRequest``): a Produce carrying transactional
    batches needs a transactional id the principal may WRITE, else every partition is
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED; and the batches' producer must be that id's
    (the coordinator's check, as KIP-890's verification answers: INVALID_PRODUCER_ID_MAPPING).
    WRITE on the topic alone, or on another id, does not let a principal write into a
    transaction it may not write to (which its owner would then commit)."""
    import datetime

    from kio.schema.add_partitions_to_txn.v3.request import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnTopic,
    )
    from kio.schema.add_partitions_to_txn.v3.response import AddPartitionsToTxnResponse
    from kio.schema.errors import ErrorCode
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.schema.produce.v9.response import ProduceResponse

    from app.common.batch import BatchBuilder

    topic = f"txnacl-{uuid.uuid4().hex[:8]}"
    owned, mine = f"owned-{uuid.uuid4().hex[:8]}", f"mine-{uuid.uuid4().hex[:8]}"
    with admin_http(acl_broker) as http:
        assert http.post("/topics", json={"name": topic, "partitions": 1}).status_code == 201
        acl = {
            "resource_type": "TRANSACTIONAL_ID",
            "resource_name": mine,
            "principal": "User:reader",
            "operation": "WRITE",
        }
        assert http.post("/acls", json={"acls": [acl]}).status_code == 201
    grant(acl_broker, topic, "WRITE")
    admin = login(acl_broker, "admin")
    init = admin.call(
        InitProducerIdRequest(
            transactional_id=owned,
            transaction_timeout=datetime.timedelta(seconds=60),  # type: ignore[arg-type]
            producer_id=-1,  # type: ignore[arg-type]
            producer_epoch=-1,  # type: ignore[arg-type]
        ),
        InitProducerIdResponse,
    )
    assert init.error_code == ErrorCode.none
    added = admin.call(
        AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=owned,
            v3_and_below_producer_id=init.producer_id,
            v3_and_below_producer_epoch=init.producer_epoch,
            v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=(0,)),),  # type: ignore[arg-type]
        ),
        AddPartitionsToTxnResponse,
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == (
        ErrorCode.none
    )
    # The owner's transactional batch, as a principal who learnt its producer id would send it.
    builder = BatchBuilder(
        producer_id=init.producer_id,
        producer_epoch=init.producer_epoch,
        base_sequence=0,
        transactional=True,
    )
    builder.append(b"injected")
    records = builder.build()

    def produce(wire: Any, transactional_id: str | None) -> ErrorCode:
        answer = wire.call(
            ProduceRequest(
                transactional_id=transactional_id,
                acks=-1,  # type: ignore[arg-type]
                timeout=datetime.timedelta(seconds=30),  # type: ignore[arg-type]
                topic_data=(
                    TopicProduceData(
                        name=topic,
                        partition_data=(PartitionProduceData(index=0, records=records),),  # type: ignore[arg-type]
                    ),
                ),
            ),
            ProduceResponse,
        )
        return answer.responses[0].partition_responses[0].error_code  # type: ignore[no-any-return]

    reader = login(acl_broker, "reader")
    assert produce(reader, None) == ErrorCode.transactional_id_authorization_failed
    assert produce(reader, mine) == ErrorCode.invalid_producer_id_mapping
    assert produce(reader, owned) == ErrorCode.transactional_id_authorization_failed
    with admin_http(acl_broker) as http:
        r = http.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": 0, "isolation_level": "read_uncommitted"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["records"] == []
    # The owner itself writes in its transaction.
    assert produce(admin, owned) == ErrorCode.none
