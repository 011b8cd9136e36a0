"""The one error tree of Logbus.

Every error the core raises is a :class:`LogbusError`. Each carries the Kafka
error name clients switch on (``error_code``), whether retrying the same
request may succeed (``retriable``), and the fields that explain it, so the
HTTP layer (``app.api.errors``) can map it to a status and a JSON body in one
place without parsing messages. The schema types' and the schema registry's branch
(``InvalidSchema``, ``RecordInvalid``, ``NotSchemaFramed``, ``SchemaRegistryError`` and
its Confluent-coded subclasses) lives in :mod:`app.common.schema_errors` and the consumer groups' branch (``GroupError``
and its subclasses) in :mod:`app.common.group_errors`: one tree, three modules, split for
size.

::

    LogbusError
    ├── InvalidRequest                 INVALID_REQUEST
    │   ├── InvalidConfig              INVALID_CONFIG
    │   ├── InvalidTopic               INVALID_TOPIC_EXCEPTION
    │   ├── InvalidPartitions          INVALID_PARTITIONS
    │   │   └── PartitionLimitExceeded INVALID_PARTITIONS           (over the broker's fd budget)
    │   ├── InvalidReplicationFactor   INVALID_REPLICATION_FACTOR
    │   ├── InvalidRequiredAcks        INVALID_REQUIRED_ACKS
    │   ├── SecurityDisabled           SECURITY_DISABLED            (ACL calls without an authorizer)
    │   ├── UnknownProducerId          UNKNOWN_PRODUCER_ID          (an id this broker never issued)
    │   ├── InvalidTxnState            INVALID_TXN_STATE            (a write that breaks the transaction)
    │   ├── TransactionCoordinatorFenced TRANSACTION_COORDINATOR_FENCED (a marker from an old coordinator)
    │   └── InvalidTransactionTimeout  INVALID_TRANSACTION_TIMEOUT  (over transaction.max.timeout.ms)
    ├── CorruptRecord                  CORRUPT_MESSAGE
    │   └── StoredBatchCorrupt         CORRUPT_MESSAGE              (503: a stored batch is damaged)
    ├── InvalidRecord                  INVALID_RECORD
    ├── UnsupportedMessageFormat       UNSUPPORTED_FOR_MESSAGE_FORMAT
    ├── UnsupportedCompressionType     UNSUPPORTED_COMPRESSION_TYPE
    ├── RecordTooLarge                 MESSAGE_TOO_LARGE
    ├── PayloadTooLarge                MESSAGE_TOO_LARGE (request body over the limit)
    ├── OffsetOutOfRange               OFFSET_OUT_OF_RANGE
    ├── UnknownTopicOrPartition        UNKNOWN_TOPIC_OR_PARTITION
    │   └── UnknownTopicId             UNKNOWN_TOPIC_ID             (no topic has the id asked for)
    ├── TopicAlreadyExists             TOPIC_ALREADY_EXISTS
    ├── OutOfOrderSequence             OUT_OF_ORDER_SEQUENCE_NUMBER (idempotent producer gap)
    ├── InvalidProducerEpoch           INVALID_PRODUCER_EPOCH       (fenced by a newer epoch)
    │   └── ProducerFenced             PRODUCER_FENCED              (a transaction marker's epoch is old)
    ├── RequestTimedOut                REQUEST_TIMED_OUT            (retriable)
    ├── NotLeaderOrFollower            NOT_LEADER_OR_FOLLOWER       (retriable; 307 to the leader)
    ├── LeaderNotAvailable             LEADER_NOT_AVAILABLE         (retriable; election under way)
    ├── OffsetNotAvailable             OFFSET_NOT_AVAILABLE         (retriable; a new leader's HW lags)
    ├── LeaderEpochMismatch            (a replica's request names another leader epoch)
    │   ├── FencedLeaderEpoch          FENCED_LEADER_EPOCH          (retriable; the caller is behind)
    │   └── UnknownLeaderEpoch         UNKNOWN_LEADER_EPOCH         (retriable; this broker is behind)
    ├── NotCoordinator                 NOT_COORDINATOR              (retriable; 421 with the coordinator)
    │   └── TxnNotCoordinator          NOT_COORDINATOR              (of a transactional id)
    ├── TransactionError               transactions (app.txn)
    │   ├── ConcurrentTransactions     CONCURRENT_TRANSACTIONS      (409, retriable: one completes)
    │   ├── TransactionalIdNotFound    TRANSACTIONAL_ID_NOT_FOUND   (404)
    │   └── InvalidProducerIdMapping   INVALID_PRODUCER_ID_MAPPING  (409: not this id's producer)
    ├── NotEnoughReplicas              NOT_ENOUGH_REPLICAS          (retriable)
    │   └── NotEnoughReplicasAfterAppend  NOT_ENOUGH_REPLICAS_AFTER_APPEND (written, not replicated)
    ├── BrokerNotAvailable             BROKER_NOT_AVAILABLE         (retriable)
    │   └── ZooKeeperUnavailable       BROKER_NOT_AVAILABLE         (cluster metadata unreachable)
    ├── KafkaStorageError              KAFKA_STORAGE_ERROR          (retriable)
    │   └── SegmentClosed              (a reader's segment was deleted under it; the log retries)
    ├── SaslAuthenticationFailed       SASL_AUTHENTICATION_FAILED   (401: no or bad credentials)
    ├── AuthorizationFailed            (403: an ACL refuses; names the resource and operation)
    │   ├── TopicAuthorizationFailed   TOPIC_AUTHORIZATION_FAILED
    │   ├── GroupAuthorizationFailed   GROUP_AUTHORIZATION_FAILED
    │   ├── TransactionalIdAuthorizationFailed  TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    │   └── ClusterAuthorizationFailed CLUSTER_AUTHORIZATION_FAILED (also a broker-only call
    │                                                                 not from a broker)
    └── GroupError                     consumer groups: app.common.group_errors
"""

from __future__ import annotations

from typing import Any, ClassVar


class LogbusError(Exception):
    """Base of every error the core raises on purpose.

    A subclass states its Kafka error name and retriability as class keywords, e.g.
    ``class LeaderNotAvailable(LogbusError, error_code="LEADER_NOT_AVAILABLE",
    retriable=True)``; one it leaves out is inherited. A class that states
    ``error_code`` is the class for that code (``app.common.error_body``).
    """

    error_code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init_subclass__(
        cls, *, error_code: str | None = None, retriable: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        if error_code is not None:
            cls.error_code = error_code
        if retriable is not None:
            cls.retriable = retriable

    # Set per instance by __init__; a class-level empty default for instances made
    # without it (the SDK rebuilds errors from answer bodies).
    _fields: dict[str, Any] = {}

    def __init__(self, message: str, **fields: Any) -> None:
        """``fields``: the structured details of the error, each also an attribute of the
        same name, and the extra keys of its HTTP error body."""
        super().__init__(message)
        self.message = message
        self._fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    def fields(self) -> dict[str, Any]:
        """Structured details that go into the error body beside the message."""
        return dict(self._fields)


class InvalidRequest(LogbusError, error_code="INVALID_REQUEST"):
    """A request the broker cannot act on as sent (a bad field, a bad combination): fix it,
    do not retry."""


class InvalidConfig(InvalidRequest, error_code="INVALID_CONFIG"):
    """A config value that is missing, of the wrong type or out of range; ``config`` names
    it."""

    config: str
    name: str
    value: object

    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"invalid config {name}={value!r}: {reason}", config=name)
        self.name = name
        self.value = value


class InvalidTopic(InvalidRequest, error_code="INVALID_TOPIC_EXCEPTION"):
    """A topic name Kafka does not allow (empty, too long, ``.``/``..``, a character
    outside ``[a-zA-Z0-9._-]``), or an internal topic a client may not write or delete."""

    topic: str

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"invalid topic name {topic!r}: {reason}", topic=topic)


class InvalidPartitions(InvalidRequest, error_code="INVALID_PARTITIONS"):
    """A partition count that is not allowed (zero, negative, or fewer than the topic has)."""


class PartitionLimitExceeded(InvalidPartitions):
    """A create asks for more partitions than this broker's file-descriptor budget allows
    (``app.core.limits``); nothing was written. ``setting`` names the limit that refused."""

    limit: int
    setting: str

    def __init__(self, message: str, limit: int, setting: str) -> None:
        super().__init__(message, limit=limit, setting=setting)


class PolicyViolation(InvalidRequest, error_code="POLICY_VIOLATION"):
    """A request the topic's configured policy forbids: DeleteRecords on a topic whose
    ``cleanup.policy`` does not include ``delete`` (compacted only), as Kafka refuses it."""


class InvalidReplicationFactor(InvalidRequest, error_code="INVALID_REPLICATION_FACTOR"):
    """A replication factor below 1 or above the number of live brokers."""


class InvalidRequiredAcks(InvalidRequest, error_code="INVALID_REQUIRED_ACKS"):
    """An ``acks`` other than 0, 1 or -1 (all)."""


class SecurityDisabled(InvalidRequest, error_code="SECURITY_DISABLED"):
    """An ACL call on a broker with no authorizer configured (``authorizer=acl`` turns it on)."""


class UnknownProducerId(InvalidRequest, error_code="UNKNOWN_PRODUCER_ID"):
    """An InitProducerId epoch bump named a producer id this broker never handed out."""

    producer_id: int

    def __init__(self, producer_id: int) -> None:
        super().__init__(
            f"producer id {producer_id} was not issued by this broker", producer_id=producer_id
        )


class CorruptRecord(LogbusError, error_code="CORRUPT_MESSAGE"):
    """A batch failed its CRC, is truncated, or its header is inconsistent."""


class StoredBatchCorrupt(CorruptRecord):
    """A batch *stored* in a partition fails its CRC (the disk damaged it after it was
    written): not the client's fault, and retrying the same offset cannot help. The
    records before it are served; this names the damaged range."""

    topic: str
    partition: int
    offset: int
    last_offset: int

    def __init__(self, topic: str, partition: int, offset: int, last_offset: int) -> None:
        super().__init__(
            f"the stored batch holding offsets {offset} to {last_offset} of {topic}-{partition} "
            "is damaged (CRC-32C mismatch) and is not served; read on from "
            f"{last_offset + 1} or from another replica",
            topic=topic,
            partition=partition,
            offset=offset,
            last_offset=last_offset,
        )


class InvalidRecord(LogbusError, error_code="INVALID_RECORD"):
    """A request without a record batch, or a typed record that does not decode with its schema."""


class UnsupportedMessageFormat(LogbusError, error_code="UNSUPPORTED_FOR_MESSAGE_FORMAT"):
    """A batch in an old message format (magic 0 or 1): only RecordBatch v2 is taken."""

    magic: int

    def __init__(self, magic: int) -> None:
        super().__init__(
            f"record batch magic {magic} is not supported; send RecordBatch v2 (magic 2)",
            magic=magic,
        )


class UnsupportedCompressionType(LogbusError, error_code="UNSUPPORTED_COMPRESSION_TYPE"):
    """A compression name or codec bits that are not none, gzip, snappy, lz4 or zstd."""


class RecordTooLarge(LogbusError, error_code="MESSAGE_TOO_LARGE"):
    """A record batch over the topic's ``max.message.bytes`` or another size limit."""

    size: int
    limit: int

    def __init__(self, size: int, limit: int, what: str = "record batch") -> None:
        super().__init__(
            f"{what} of {size} bytes exceeds the limit of {limit} bytes", size=size, limit=limit
        )


class PayloadTooLarge(RecordTooLarge):
    """A request body went over the server's limit while it was being read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(size, limit, what="request body")


class OffsetOutOfRange(LogbusError, error_code="OFFSET_OUT_OF_RANGE"):
    """An offset outside the partition's log, ``log_start_offset`` to ``log_end_offset``."""

    topic: str
    partition: int
    offset: int
    log_start_offset: int
    log_end_offset: int

    def __init__(
        self, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int
    ) -> None:
        super().__init__(
            f"offset {offset} is out of range for {topic}-{partition}: "
            f"valid offsets are {log_start_offset} to {log_end_offset}",
            topic=topic,
            partition=partition,
            offset=offset,
            log_start_offset=log_start_offset,
            log_end_offset=log_end_offset,
        )


class UnknownTopicOrPartition(LogbusError, error_code="UNKNOWN_TOPIC_OR_PARTITION"):
    """No such topic, or no such partition of it (``partition`` None: the topic)."""

    topic: str
    partition: int | None

    def __init__(self, topic: str, partition: int | None = None) -> None:
        what = f"topic {topic!r}" if partition is None else f"partition {topic}-{partition}"
        super().__init__(f"{what} does not exist", topic=topic, partition=partition)


class UnknownTopicId(UnknownTopicOrPartition, error_code="UNKNOWN_TOPIC_ID"):
    """No topic has this id (Kafka's topic ids, KIP-516: a topic deleted and created
    again under the same name has a new id). ``topic_id`` is Kafka's text form."""

    topic_id: str

    def __init__(self, topic_id: str) -> None:
        LogbusError.__init__(
            self, f"no topic has id {topic_id}", topic="", partition=None, topic_id=topic_id
        )


class TopicAlreadyExists(LogbusError, error_code="TOPIC_ALREADY_EXISTS"):
    """A create of a topic that exists already."""

    topic: str

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists", topic=topic)


class OutOfOrderSequence(LogbusError, error_code="OUT_OF_ORDER_SEQUENCE_NUMBER"):
    """An idempotent producer's batch does not follow its last sequence on this partition.

    Not retriable: resending the same batch cannot close the gap. The producer
    has lost track of what was written and must bump its epoch (POST
    /producers with its id and epoch) and start again at sequence 0.
    """

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    sequence: int
    expected_sequence: int

    def __init__(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        sequence: int,
        expected: int,
        reason: str,
    ) -> None:
        super().__init__(
            f"{topic}-{partition}: batch of producer {producer_id} (epoch {producer_epoch}) "
            f"starts at sequence {sequence}, expected {expected}: {reason}",
            topic=topic,
            partition=partition,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            sequence=sequence,
            expected_sequence=expected,
        )


class InvalidProducerEpoch(LogbusError, error_code="INVALID_PRODUCER_EPOCH"):
    """A batch carries an epoch older than the newest one seen for its producer (a zombie)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    current_epoch: int

    def __init__(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, current: int
    ) -> None:
        super().__init__(
            f"{topic}-{partition}: producer {producer_id} has epoch {current}; "
            f"a batch with the older epoch {producer_epoch} is fenced",
            topic=topic,
            partition=partition,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            current_epoch=current,
        )

    @classmethod
    def of_transaction(
        cls, transactional_id: str, producer_id: int, producer_epoch: int, current: int
    ) -> InvalidProducerEpoch:
        """The same error from a transaction coordinator (no partition involved)."""
        exc = cls.__new__(cls)
        LogbusError.__init__(
            exc,
            f"transactional id {transactional_id!r}: producer {producer_id} has epoch "
            f"{current}; epoch {producer_epoch} is "
            + (
                "fenced (a newer instance initialized the id, or the broker aborted its "
                "timed-out transaction)"
                if producer_epoch < current
                else "newer than any the coordinator handed out"
            ),
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            current_epoch=current,
        )
        return exc


class ProducerFenced(InvalidProducerEpoch, error_code="PRODUCER_FENCED"):
    """A transaction marker names an epoch older than its producer's: that producer
    instance was fenced by a newer one with the same transactional id."""


class InvalidTxnState(InvalidRequest, error_code="INVALID_TXN_STATE"):
    """A write that the producer's transaction state forbids (for instance a
    non-transactional batch while the producer's transaction is open)."""


class TransactionCoordinatorFenced(InvalidRequest, error_code="TRANSACTION_COORDINATOR_FENCED"):
    """A transaction marker from a coordinator epoch older than one already seen."""


class InvalidTransactionTimeout(InvalidRequest, error_code="INVALID_TRANSACTION_TIMEOUT"):
    """A transaction timeout below 1 ms or over the broker's transaction.max.timeout.ms."""


class TransactionError(LogbusError):
    """A transaction coordinator request refused (``app.txn``); names the transactional id."""

    transactional_id: str

    def __init__(self, message: str, transactional_id: str, **fields: Any) -> None:
        super().__init__(message, transactional_id=transactional_id, **fields)


class ConcurrentTransactions(
    TransactionError, error_code="CONCURRENT_TRANSACTIONS", retriable=True
):
    """The transactional id's previous transaction is still being completed (its markers
    are being written): retry shortly."""


class TransactionalIdNotFound(TransactionError, error_code="TRANSACTIONAL_ID_NOT_FOUND"):
    """A transactional id its coordinator does not know (InitProducerId first)."""

    def __init__(self, transactional_id: str) -> None:
        super().__init__(
            f"transactional id {transactional_id!r} is not known to its coordinator "
            "(InitProducerId with it first)",
            transactional_id,
        )


class InvalidProducerIdMapping(TransactionError, error_code="INVALID_PRODUCER_ID_MAPPING"):
    """The producer id is not the one the transactional id holds now."""


class RequestTimedOut(LogbusError, error_code="REQUEST_TIMED_OUT", retriable=True):
    """The request did not complete in its timeout (acks=all waiting on the in-sync replicas)."""


class NotLeaderOrFollower(LogbusError, error_code="NOT_LEADER_OR_FOLLOWER", retriable=True):
    """This broker does not lead the partition; ``leader_url`` says who does, when known."""

    topic: str
    partition: int
    leader: int | None
    leader_url: str | None

    def __init__(
        self,
        topic: str,
        partition: int,
        leader: int | None = None,
        leader_url: str | None = None,
        message: str | None = None,
    ) -> None:
        where = f"broker {leader} ({leader_url})" if leader_url else "no broker yet (election)"
        super().__init__(
            message or f"this broker does not lead {topic}-{partition}; its leader is {where}",
            topic=topic,
            partition=partition,
            leader=leader,
            leader_url=leader_url,
        )


class LeaderNotAvailable(LogbusError, error_code="LEADER_NOT_AVAILABLE", retriable=True):
    """The partition has no leader right now (an election is under way): retry shortly."""


class OffsetNotAvailable(LogbusError, error_code="OFFSET_NOT_AVAILABLE", retriable=True):
    """Kafka's OFFSET_NOT_AVAILABLE (protocol error code 78, retriable): a client asked a
    newly elected leader for its end (ListOffsets ``latest``, or a timestamp past what it
    can answer) while its high watermark is still below the offset its leader epoch began
    at. The high watermark a broker had as a follower can trail the records acknowledged
    before the election by any amount; it catches up once the followers fetch from the
    new leader, so answering it would move offsets backwards (a ``latest`` of 0 for a
    partition holding acknowledged records). Retry after a short backoff."""

    topic: str
    partition: int
    high_watermark: int
    epoch_start_offset: int
    leader_epoch: int

    def __init__(
        self,
        topic: str,
        partition: int,
        high_watermark: int,
        epoch_start_offset: int,
        leader_epoch: int,
    ) -> None:
        super().__init__(
            f"the offsets of {topic}-{partition} are not available yet: its high watermark "
            f"({high_watermark}) lags behind the start offset of leader epoch {leader_epoch} "
            f"({epoch_start_offset}) after a leader election; retry shortly",
            topic=topic,
            partition=partition,
            high_watermark=high_watermark,
            epoch_start_offset=epoch_start_offset,
            leader_epoch=leader_epoch,
        )


class LeaderEpochMismatch(LogbusError, error_code="FENCED_LEADER_EPOCH", retriable=True):
    """A request names a leader epoch other than the partition's current one."""

    topic: str
    partition: int
    leader_epoch: int
    current_leader_epoch: int

    def __init__(self, topic: str, partition: int, epoch: int, current: int) -> None:
        super().__init__(
            f"leader epoch {epoch} of {topic}-{partition} does not match this broker's "
            f"epoch {current}",
            topic=topic,
            partition=partition,
            leader_epoch=epoch,
            current_leader_epoch=current,
        )


class FencedLeaderEpoch(LeaderEpochMismatch, error_code="FENCED_LEADER_EPOCH"):
    """The request names an older leader epoch than the partition's current one."""


class UnknownLeaderEpoch(LeaderEpochMismatch, error_code="UNKNOWN_LEADER_EPOCH"):
    """The request names a newer leader epoch than this broker has heard of yet."""


class NotCoordinator(LogbusError, error_code="NOT_COORDINATOR", retriable=True):
    """Another broker coordinates this group (it leads the group's offsets partition)."""

    group: str
    coordinator: int | None
    coordinator_url: str | None

    def __init__(
        self, group: str, coordinator: int | None = None, coordinator_url: str | None = None
    ) -> None:
        where = f"broker {coordinator} ({coordinator_url})" if coordinator_url else "not known yet"
        super().__init__(
            f"this broker does not coordinate group {group!r}; its coordinator is {where}",
            group=group,
            coordinator=coordinator,
            coordinator_url=coordinator_url,
        )


class TxnNotCoordinator(NotCoordinator):
    """Another broker coordinates this transactional id (it leads the id's
    ``__transaction_state`` partition)."""

    def __init__(
        self,
        transactional_id: str,
        coordinator: int | None = None,
        coordinator_url: str | None = None,
    ) -> None:
        where = f"broker {coordinator} ({coordinator_url})" if coordinator_url else "not known yet"
        LogbusError.__init__(
            self,
            f"this broker does not coordinate transactional id {transactional_id!r}; its "
            f"coordinator is {where}",
            transactional_id=transactional_id,
            coordinator=coordinator,
            coordinator_url=coordinator_url,
        )


class NotEnoughReplicas(LogbusError, error_code="NOT_ENOUGH_REPLICAS", retriable=True):
    """acks=all: fewer in-sync replicas than ``min.insync.replicas``; nothing was written."""


class NotEnoughReplicasAfterAppend(
    NotEnoughReplicas, error_code="NOT_ENOUGH_REPLICAS_AFTER_APPEND"
):
    """acks=all: the leader wrote the batch, then the ISR fell below min.insync.replicas."""


class BrokerNotAvailable(LogbusError, error_code="BROKER_NOT_AVAILABLE", retriable=True):
    """The broker is up but not serving yet (starting, recovering logs) or already stopping."""


class ZooKeeperUnavailable(BrokerNotAvailable):
    """Cluster mode: ZooKeeper does not answer, so cluster metadata cannot change now
    (topics, producer ids). Partitions go on being served by their current leaders."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"ZooKeeper is not reachable, so {what} must wait until it is back; retry later"
        )


class KafkaStorageError(LogbusError, error_code="KAFKA_STORAGE_ERROR", retriable=True):
    """The disk under a log failed; the log is offline until the broker restarts."""


class SegmentClosed(KafkaStorageError):
    """A segment was closed (deleted, or its log closed) before a reader took its file.

    :class:`app.core.log.Log` answers it by reading again from its current
    segments; it reaches a caller only when the log itself is closed.
    """


class SaslAuthenticationFailed(LogbusError, error_code="SASL_AUTHENTICATION_FAILED"):
    """No credentials where the broker requires them, or credentials it refused (unknown
    user, wrong password, a bearer token expired, wrongly signed or for another audience).
    The message says why, never what was presented; ``challenge`` is the
    ``WWW-Authenticate`` value the HTTP layer answers with (set by the authenticator)."""

    challenge: str = ""


class AuthorizationFailed(LogbusError):
    """The principal may not do ``operation`` on the resource (Kafka's ACLs). Nothing was
    done. Fields: ``resource_type``, ``resource_name``, ``operation``."""


class TopicAuthorizationFailed(AuthorizationFailed, error_code="TOPIC_AUTHORIZATION_FAILED"):
    """An ACL refuses the operation on a topic."""


class GroupAuthorizationFailed(AuthorizationFailed, error_code="GROUP_AUTHORIZATION_FAILED"):
    """An ACL refuses the operation on a consumer group."""


class TransactionalIdAuthorizationFailed(
    AuthorizationFailed, error_code="TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
):
    """An ACL refuses the operation on a transactional id."""


class ClusterAuthorizationFailed(AuthorizationFailed, error_code="CLUSTER_AUTHORIZATION_FAILED"):
    """An ACL refuses an operation on the cluster resource; or a call only brokers make (a
    replica's fetch) came without the credentials of the broker it claims to come from:
    refused, and it changes nothing (ISR, high watermark, acks)."""
