"""The one error tree of Logbus.

Every error the core raises is a :class:`LogbusError`. Each carries the Kafka
error name clients switch on (``error_code``), whether retrying the same
request may succeed (``retriable``), and the fields that explain it, so the
HTTP layer (``app.api.errors``) can map it to a status and a JSON body in one
place without parsing messages.

::

    LogbusError
    ├── InvalidRequest                 INVALID_REQUEST
    │   ├── InvalidConfig              INVALID_CONFIG
    │   ├── InvalidTopic               INVALID_TOPIC_EXCEPTION
    │   ├── InvalidPartitions          INVALID_PARTITIONS
    │   ├── InvalidReplicationFactor   INVALID_REPLICATION_FACTOR
    │   └── InvalidRequiredAcks        INVALID_REQUIRED_ACKS
    ├── CorruptRecord                  CORRUPT_MESSAGE
    ├── InvalidRecord                  INVALID_RECORD
    ├── UnsupportedMessageFormat       UNSUPPORTED_FOR_MESSAGE_FORMAT
    ├── UnsupportedCompressionType     UNSUPPORTED_COMPRESSION_TYPE
    ├── RecordTooLarge                 MESSAGE_TOO_LARGE
    ├── PayloadTooLarge                MESSAGE_TOO_LARGE (request body over the limit)
    ├── OffsetOutOfRange               OFFSET_OUT_OF_RANGE
    ├── UnknownTopicOrPartition        UNKNOWN_TOPIC_OR_PARTITION
    ├── TopicAlreadyExists             TOPIC_ALREADY_EXISTS
    ├── RequestTimedOut                REQUEST_TIMED_OUT            (retriable)
    ├── NotLeaderOrFollower            NOT_LEADER_OR_FOLLOWER       (retriable)
    ├── NotEnoughReplicas              NOT_ENOUGH_REPLICAS          (retriable)
    ├── BrokerNotAvailable             BROKER_NOT_AVAILABLE         (retriable)
    └── KafkaStorageError              KAFKA_STORAGE_ERROR          (retriable)
"""

from __future__ import annotations

from typing import Any, ClassVar


class LogbusError(Exception):
    """Base of every error the core raises on purpose."""

    error_code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def fields(self) -> dict[str, Any]:
        """Structured details that go into the error body beside the message."""
        return {}


class InvalidRequest(LogbusError):
    error_code = "INVALID_REQUEST"


class InvalidConfig(InvalidRequest):
    error_code = "INVALID_CONFIG"

    def __init__(self, name: str, value: object, reason: str) -> None:
        super().__init__(f"invalid config {name}={value!r}: {reason}")
        self.name = name
        self.value = value

    def fields(self) -> dict[str, Any]:
        return {"config": self.name}


class InvalidTopic(InvalidRequest):
    error_code = "INVALID_TOPIC_EXCEPTION"

    def __init__(self, topic: str, reason: str) -> None:
        super().__init__(f"invalid topic name {topic!r}: {reason}")
        self.topic = topic

    def fields(self) -> dict[str, Any]:
        return {"topic": self.topic}


class InvalidPartitions(InvalidRequest):
    error_code = "INVALID_PARTITIONS"


class InvalidReplicationFactor(InvalidRequest):
    error_code = "INVALID_REPLICATION_FACTOR"


class InvalidRequiredAcks(InvalidRequest):
    error_code = "INVALID_REQUIRED_ACKS"


class CorruptRecord(LogbusError):
    """A batch failed its CRC, is truncated, or its header is inconsistent."""

    error_code = "CORRUPT_MESSAGE"


class InvalidRecord(LogbusError):
    error_code = "INVALID_RECORD"


class UnsupportedMessageFormat(LogbusError):
    error_code = "UNSUPPORTED_FOR_MESSAGE_FORMAT"

    def __init__(self, magic: int) -> None:
        super().__init__(
            f"record batch magic {magic} is not supported; send RecordBatch v2 (magic 2)"
        )
        self.magic = magic

    def fields(self) -> dict[str, Any]:
        return {"magic": self.magic}


class UnsupportedCompressionType(LogbusError):
    error_code = "UNSUPPORTED_COMPRESSION_TYPE"


class RecordTooLarge(LogbusError):
    error_code = "MESSAGE_TOO_LARGE"

    def __init__(self, size: int, limit: int, what: str = "record batch") -> None:
        super().__init__(f"{what} of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit

    def fields(self) -> dict[str, Any]:
        return {"size": self.size, "limit": self.limit}


class PayloadTooLarge(RecordTooLarge):
    """A request body went over the server's limit while it was being read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(size, limit, what="request body")


class OffsetOutOfRange(LogbusError):
    error_code = "OFFSET_OUT_OF_RANGE"

    def __init__(
        self, topic: str, partition: int, offset: int, log_start_offset: int, log_end_offset: int
    ) -> None:
        super().__init__(
            f"offset {offset} is out of range for {topic}-{partition}: "
            f"valid offsets are {log_start_offset} to {log_end_offset}"
        )
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset

    def fields(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
        }


class UnknownTopicOrPartition(LogbusError):
    error_code = "UNKNOWN_TOPIC_OR_PARTITION"

    def __init__(self, topic: str, partition: int | None = None) -> None:
        what = f"topic {topic!r}" if partition is None else f"partition {topic}-{partition}"
        super().__init__(f"{what} does not exist")
        self.topic = topic
        self.partition = partition

    def fields(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition}


class TopicAlreadyExists(LogbusError):
    error_code = "TOPIC_ALREADY_EXISTS"

    def __init__(self, topic: str) -> None:
        super().__init__(f"topic {topic!r} already exists")
        self.topic = topic

    def fields(self) -> dict[str, Any]:
        return {"topic": self.topic}


class RequestTimedOut(LogbusError):
    error_code = "REQUEST_TIMED_OUT"
    retriable = True


class NotLeaderOrFollower(LogbusError):
    error_code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class NotEnoughReplicas(LogbusError):
    error_code = "NOT_ENOUGH_REPLICAS"
    retriable = True


class BrokerNotAvailable(LogbusError):
    """The broker is up but not serving yet (starting, recovering logs) or already stopping."""

    error_code = "BROKER_NOT_AVAILABLE"
    retriable = True


class KafkaStorageError(LogbusError):
    """The disk under a log failed; the log is offline until the broker restarts."""

    error_code = "KAFKA_STORAGE_ERROR"
    retriable = True
