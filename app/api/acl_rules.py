"""The table from each HTTP operation (its OpenAPI ``operationId``) to the ACL actions
Kafka requires for the equivalent API: produce -> WRITE on the topic, fetch -> READ,
group calls -> READ on the group (and the topics), transactions -> WRITE on the
transactional id, and so on. A rule reads the path parameters, the query string (only
the operations in ``QUERY_RULES``) and the JSON body (only those in ``BODY_RULES``)
and returns the actions to check; :mod:`app.api.security` applies them before the
route runs. Pure data and functions: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from app.core.security.acl import (
    CLUSTER,
    Action,
    Operation,
    Resource,
    ResourceType,
)

T, G, TX = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
INTERNAL_TOPIC = "__consumer_offsets"

Rule: TypeAlias = Callable[[dict[str, str], dict[str, list[str]], Any], list[Any]]


def _topic(op: Operation, key: str = "topic") -> Rule:
    def rule(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
        return [Action(op, Resource(T, path[key]))]

    return rule


def _group(op: Operation, topics_op: Operation | None = None, body_topics: str = "") -> Rule:
    def rule(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
        actions = [Action(op, Resource(G, path["group"]))]
        if topics_op is not None:
            for name in _body_topics(body, body_topics) + query.get("topic", []):
                actions.append(Action(topics_op, Resource(T, name)))
        return actions

    return rule


def _body_topics(body: Any, where: str) -> list[str]:
    if not isinstance(body, dict) or not where:
        return []
    if where == "offsets":
        return sorted(
            {
                e["topic"]
                for e in body.get("offsets") or ()
                if isinstance(e, dict) and isinstance(e.get("topic"), str)
            }
        )
    value = body.get(where)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return sorted({t for t in value if isinstance(t, str)})
    return []


def _cluster(op: Operation) -> Rule:
    def rule(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Any]:
        return [Action(op, CLUSTER)]

    return rule


def _nothing(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
    """Authenticated, and the route filters what it answers (:func:`visible`)."""
    return []


def _create_topic(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
    # Kafka's CreateTopics: CREATE on the cluster, or else CREATE on the topic.
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str):
        return [Action(Operation.CREATE, CLUSTER)]
    return [_either(Action(Operation.CREATE, CLUSTER), Action(Operation.CREATE, Resource(T, name)))]


def _find_coordinator(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
    # Kafka's FindCoordinator: DESCRIBE on the group, or on the transactional id.
    key = body.get("key") if isinstance(body, dict) else None
    if not isinstance(key, str):
        return []
    kind = TX if body.get("key_type") == "transaction" else G
    return [Action(Operation.DESCRIBE, Resource(kind, key))]


def _init_producer_id(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
    # Kafka's InitProducerId: WRITE on the transactional id; without one, IDEMPOTENT_WRITE
    # on the cluster or WRITE on any topic (KIP-679), checked by the middleware.
    tx = body.get("transactional_id") if isinstance(body, dict) else None
    if isinstance(tx, str):
        return [Action(Operation.WRITE, Resource(TX, tx))]
    return [IDEMPOTENT]


def _metadata(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Any]:
    # Listing is filtered by DESCRIBE in the route; creating needs CREATE (Kafka's
    # auto-create through Metadata).
    if query.get("allow_auto_topic_creation", ["false"])[-1].lower() in ("true", "1", "yes", "on"):
        names = [n.strip() for t in query.get("topics", []) for n in t.split(",") if n.strip()]
        return [AutoCreate(n) for n in names]
    return []


@dataclass(frozen=True)
class Either:
    """Allowed when either action is (Kafka's cluster-or-resource checks)."""

    first: Action
    second: Action


IDEMPOTENT = Action(Operation.IDEMPOTENT_WRITE, CLUSTER)


def _either(first: Action, second: Action) -> Any:
    return Either(first, second)


@dataclass(frozen=True)
class AutoCreate:
    """A produce to a topic that does not exist creates it (auto.create.topics.enable):
    Kafka's auto-create needs CREATE on the cluster or the topic."""

    topic: str


def _produce(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Any]:
    return [Action(Operation.WRITE, Resource(T, path["topic"])), AutoCreate(path["topic"])]


def _transactional(
    op: Operation,
    *,
    body_topics: str = "",
    path_topic: bool = False,
    group_op: Operation | None = None,
) -> Rule:
    """Kafka's transaction APIs: ``op`` on the transactional id in the path; WRITE on the
    topics a transaction writes (AddPartitionsToTxn: the body's ``topics``; a produce:
    the path's topic), READ on the group whose offsets it commits (AddOffsetsToTxn,
    TxnOffsetCommit) and on the topics of those offsets."""

    def rule(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
        actions = [Action(op, Resource(TX, path["transactional_id"]))]
        if path_topic:
            actions.append(Action(Operation.WRITE, Resource(T, path["topic"])))
        if body_topics == "topics" and isinstance(body, dict):
            names = {
                e["topic"]
                for e in body.get("topics") or ()
                if isinstance(e, dict) and isinstance(e.get("topic"), str)
            }
            actions += [Action(Operation.WRITE, Resource(T, n)) for n in sorted(names)]
        if group_op is not None and isinstance(body, dict):
            group = body.get("group_id")
            if isinstance(group, str):
                actions.append(Action(group_op, Resource(G, group)))
            for name in _body_topics(body, body_topics):
                actions.append(Action(Operation.READ, Resource(T, name)))
        return actions

    return rule


def subject_topic(subject: str) -> str:
    """The topic a schema registry subject belongs to under Confluent's default
    TopicNameStrategy (``orders-value``, ``orders-key`` -> ``orders``); a subject of
    another strategy stands for itself."""
    for suffix in ("-value", "-key"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


def _subject(op: Operation) -> Rule:
    """The schema registry: ``op`` on the topic of the path's subject (:func:`subject_topic`):
    who may write a topic may register its schemas, who may read it may read them."""

    def rule(path: dict[str, str], query: dict[str, list[str]], body: Any) -> list[Action]:
        return [Action(op, Resource(T, subject_topic(path["subject"])))]

    return rule


RULES: dict[str, Rule | None] = {
    # None: public (probes, documents).
    "healthz": None,
    "readyz": None,
    "getMetrics": _cluster(Operation.DESCRIBE),
    "getMetadata": _metadata,
    "listTopics": _nothing,
    "createTopic": _create_topic,
    "getTopic": _topic(Operation.DESCRIBE),
    "deleteTopic": _topic(Operation.DELETE),
    "createPartitions": _topic(Operation.ALTER),
    "alterTopicConfigs": _topic(Operation.ALTER_CONFIGS),
    "deleteRecords": _topic(Operation.DELETE),
    "produce": _produce,
    "produceToPartition": _produce,
    "produceBatches": _produce,
    "fetchRecords": _topic(Operation.READ),
    "listOffsets": _topic(Operation.DESCRIBE),
    "epochEndOffset": _topic(Operation.DESCRIBE),
    "initProducerId": _init_producer_id,
    "findCoordinator": _find_coordinator,
    "listGroups": _nothing,
    "describeGroup": _group(Operation.DESCRIBE),
    "deleteGroup": _group(Operation.DELETE),
    "heartbeat": _group(Operation.READ, Operation.DESCRIBE, "subscribed_topics"),
    "commitOffsets": _group(Operation.READ, Operation.READ, "offsets"),
    "fetchOffsets": _group(Operation.DESCRIBE, Operation.DESCRIBE),
    "resetOffsets": _group(Operation.READ, Operation.READ, "topic"),
    "createAcls": _cluster(Operation.ALTER),
    "describeAcls": _cluster(Operation.DESCRIBE),
    "deleteAcls": _cluster(Operation.ALTER),
    # Kafka's DescribeClientQuotas / AlterClientQuotas.
    "describeQuotas": _cluster(Operation.DESCRIBE_CONFIGS),
    "alterQuotas": _cluster(Operation.ALTER_CONFIGS),
    # Transactions (Kafka's AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit,
    # EndTxn, DescribeTransactions, ListTransactions).
    "addPartitionsToTxn": _transactional(Operation.WRITE, body_topics="topics"),
    "produceTransactional": _transactional(Operation.WRITE, path_topic=True),
    "addOffsetsToTxn": _transactional(Operation.WRITE, group_op=Operation.READ),
    "txnOffsetCommit": _transactional(
        Operation.WRITE, group_op=Operation.READ, body_topics="offsets"
    ),
    "commitTransaction": _transactional(Operation.WRITE),
    "abortTransaction": _transactional(Operation.WRITE),
    "describeTransaction": _transactional(Operation.DESCRIBE),
    "listTransactions": _nothing,  # filtered by DESCRIBE on each id in the route
    # Kafka's WriteTxnMarkers: CLUSTER_ACTION (brokers; the route checks the credential).
    "writeTxnMarker": _cluster(Operation.CLUSTER_ACTION),
    # The schema registry (app/api/routers/schema_registry.py). Subjects map to their
    # topic (TopicNameStrategy): DESCRIBE to read a subject, WRITE to register under it,
    # ALTER_CONFIGS to delete it or set its level or mode. Ids are global (a consumer's
    # deserializer looks one up by the id in the record): any authenticated principal
    # reads them and the listings; the global level and mode are the cluster's configs.
    "listSchemaTypes": _nothing,
    "listSchemas": _nothing,
    "getSchemaById": _nothing,
    "getSchemaTextById": _nothing,
    "getSchemaSubjects": _nothing,
    "getSchemaVersions": _nothing,
    "listSubjects": _nothing,
    "listSubjectVersions": _subject(Operation.DESCRIBE),
    "getSubjectVersion": _subject(Operation.DESCRIBE),
    "getSubjectVersionSchema": _subject(Operation.DESCRIBE),
    "getReferencedBy": _subject(Operation.DESCRIBE),
    "registerSchema": _subject(Operation.WRITE),
    "lookupSchema": _subject(Operation.DESCRIBE),
    "deleteSubject": _subject(Operation.ALTER_CONFIGS),
    "deleteSubjectVersion": _subject(Operation.ALTER_CONFIGS),
    "checkCompatibility": _subject(Operation.DESCRIBE),
    "checkCompatibilityAll": _subject(Operation.DESCRIBE),
    "getGlobalConfig": _nothing,
    "setGlobalConfig": _cluster(Operation.ALTER_CONFIGS),
    "deleteGlobalConfig": _cluster(Operation.ALTER_CONFIGS),
    "getSubjectConfig": _subject(Operation.DESCRIBE),
    "setSubjectConfig": _subject(Operation.ALTER_CONFIGS),
    "deleteSubjectConfig": _subject(Operation.ALTER_CONFIGS),
    "getGlobalMode": _nothing,
    "setGlobalMode": _cluster(Operation.ALTER_CONFIGS),
    "getSubjectMode": _subject(Operation.DESCRIBE),
    "setSubjectMode": _subject(Operation.ALTER_CONFIGS),
    "deleteSubjectMode": _subject(Operation.ALTER_CONFIGS),
}
# Operations whose rule reads the query string.
QUERY_RULES = frozenset(("getMetadata", "fetchOffsets"))
# Operations whose rule reads the JSON body.
BODY_RULES = frozenset(
    (
        "createTopic",
        "findCoordinator",
        "initProducerId",
        "heartbeat",
        "commitOffsets",
        "resetOffsets",
        "addPartitionsToTxn",
        "addOffsetsToTxn",
        "txnOffsetCommit",
    )
)
