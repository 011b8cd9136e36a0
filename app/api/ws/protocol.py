"""The WebSocket protocol: message models, the message registry, close codes, frames.

Every client message is one text frame holding a JSON object with a ``type``.
The registries below (:data:`SUBSCRIBE_CLIENT`, :data:`SUBSCRIBE_SERVER`,
:data:`PRODUCE_CLIENT`, :data:`PRODUCE_SERVER`) are what the endpoints
dispatch on and send; ``openapi/asyncapi.yaml`` documents the same names, and
a test keeps the two equal.

Binary record frames (``"format": "binary"`` subscriptions), big-endian::

    offset  size  field
         0     4  magic            b"LBW1"
         4     2  topic_length     u16
         6     n  topic            UTF-8
       6+n     4  partition        i32
      10+n     8  high_watermark   i64
      18+n     8  next_offset      i64, where the partition's next frame starts
      26+n     -  batches          RecordBatch v2 bytes as stored (whole batches;
                                   the first may start before the offset asked for)

In a ``read_committed`` subscription the broker leaves out of a binary frame the
batches a read_committed reader drops (those of aborted transactions, and control
batches): the frame holds the kept batches, ``next_offset`` is past the dropped ones.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.api.codec import BodyInvalid
from app.api.errors import is_storage_error, storage_error, without_paths
from app.api.models import SHORT_MAX, RecordFormat
from app.api.util import INT_MAX, LONG_MAX
from app.common.errors import InvalidRequest, KafkaStorageError, LogbusError

BINARY_MAGIC = b"LBW1"
_TOPIC_LEN = struct.Struct(">H")
_TAIL = struct.Struct(">iqq")  # partition, high watermark, next offset

# Far beyond any real backlog, and still exact in a JavaScript number.
MAX_CREDIT = (1 << 53) - 1


class Close:
    """Close codes the broker uses (4xxx mirror the HTTP status they resemble)."""

    NORMAL = 1000
    GOING_AWAY = 1001  # the broker is shutting down
    UNSUPPORTED_DATA = 1003  # a binary frame where a JSON text frame was expected
    INTERNAL_ERROR = 1011
    TRY_AGAIN_LATER = 1013  # the broker is not serving yet
    BAD_REQUEST = 4400  # a bad first subscribe or query parameter (an error frame says why)
    UNAUTHENTICATED = 4401  # no or bad credentials, or the bearer token expired
    IDLE_TIMEOUT = 4408  # no client message within idle_timeout_ms
    SLOW_CONSUMER = 4503  # the client took no frame within send_timeout_ms (memory freed)


CLOSE_CODES: dict[int, str] = {
    Close.NORMAL: "normal closure",
    Close.GOING_AWAY: "the broker is shutting down",
    Close.UNSUPPORTED_DATA: "binary frame where a JSON text frame was expected",
    Close.INTERNAL_ERROR: "unexpected broker error",
    Close.TRY_AGAIN_LATER: "the broker is not serving yet",
    Close.BAD_REQUEST: "the first message was not a valid subscribe, or a bad query parameter",
    Close.IDLE_TIMEOUT: "no message from the client within idle_timeout_ms",
    Close.UNAUTHENTICATED: "authentication failed (the first message was not a valid auth) "
    "or the bearer token expired",
    Close.SLOW_CONSUMER: "the client took none of a frame within send_timeout_ms",
}


class _Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


Partition = Annotated[int, Field(ge=0, le=INT_MAX)]
Offset = Annotated[int, Field(ge=0, le=LONG_MAX)]
CreditAmount = Annotated[int, Field(ge=0, le=MAX_CREDIT)]


class TopicPartition(_Message):
    topic: str
    partition: Partition


class Credit(_Message):
    records: CreditAmount | None = None
    bytes: CreditAmount | None = None


class OffsetsStart(_Message):
    offsets: dict[str, dict[str, Offset]] = Field(
        description="Start offset per topic, per partition number (as a string key)."
    )
    default: Literal["earliest", "latest"] = Field(
        default="latest", description="Where partitions not listed start."
    )


class TimestampStart(_Message):
    timestamp: Annotated[int, Field(ge=0, le=LONG_MAX)]


class Subscribe(_Message):
    type: Literal["subscribe"]
    topics: list[str] | None = None
    partitions: list[TopicPartition] | None = None
    group: Annotated[str, Field(min_length=1, max_length=255)] | None = Field(
        default=None, description="Join this consumer group for as long as the socket is open."
    )
    instance_id: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    server_assignor: str | None = None
    # None: "committed" with a group, else "latest".
    start: Literal["earliest", "latest", "committed"] | OffsetsStart | TimestampStart | None = None
    default: Literal["earliest", "latest"] = Field(
        default="latest",
        description="With a group: where a partition starts when the group committed nothing.",
    )
    format: Literal["json", "binary"] = "json"
    # avro, jsonschema, protobuf: decoded by the schema id each record carries
    # (app/api/typed.py), as an HTTP JSON fetch does.
    key_format: RecordFormat = "json"
    value_format: RecordFormat = "json"
    credit: Credit = Field(default_factory=lambda: Credit(records=0))
    isolation_level: Literal["read_uncommitted", "read_committed"] = Field(
        default="read_uncommitted",
        description="read_committed: only records below the last stable offset, without "
        "those of aborted transactions (app.common.isolation).",
    )


class CreditGrant(_Message):
    type: Literal["credit"]
    records: CreditAmount | None = None
    bytes: CreditAmount | None = None


class Seek(_Message):
    type: Literal["seek"]
    topic: str
    partition: Partition
    offset: Offset | Literal["earliest", "latest"]


class Pause(_Message):
    type: Literal["pause"]
    partitions: list[TopicPartition]


class Resume(_Message):
    type: Literal["resume"]
    partitions: list[TopicPartition]


class CommitOffset(_Message):
    topic: str
    partition: Partition
    offset: Offset
    metadata: Annotated[str, Field(max_length=4096)] = ""


class Commit(_Message):
    type: Literal["commit"]
    id: str | int | None = None
    # None: the socket's current position in each of its partitions.
    offsets: list[CommitOffset] | None = None


class Ping(_Message):
    type: Literal["ping"]
    id: str | int | None = None


class Produce(_Message):
    """A produce request; each record is checked by the HTTP produce parser. With
    ``transactional_id``, ``producer_id`` and ``producer_epoch`` (all three, from
    ``POST /producers``) the records are written inside that transaction, as
    ``POST /transactions/{id}/topics/{topic}/records`` writes them, ``base_sequence``
    too (a resent message with the same number is answered with the first write's
    offsets)."""

    type: Literal["produce"] = "produce"
    id: str | int | None = None
    topic: str
    partition: Partition | None = None
    records: list[Any]
    # The typed formats and their schema fields as in HTTP produce (judged there:
    # app/api/produce_body.py, app/api/models.py ProduceRequest).
    key_format: RecordFormat = "json"
    value_format: RecordFormat = "json"
    key_schema_id: Any = None
    key_subject: Any = None
    key_schema_version: Any = None
    value_schema_id: Any = None
    value_subject: Any = None
    value_schema_version: Any = None
    key_message: Any = None
    value_message: Any = None
    timeout_ms: Annotated[int, Field(ge=1, le=INT_MAX)] = 30_000
    transactional_id: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    producer_id: Offset | None = None
    producer_epoch: Annotated[int, Field(ge=0, le=SHORT_MAX)] | None = None
    # In a transaction: the batch's first sequence number (records of one partition), so a
    # message resent after a lost ack is written once (the HTTP route's base_sequence).
    base_sequence: Annotated[int, Field(ge=0, le=INT_MAX)] | None = None

    def transaction(self) -> tuple[str, int, int] | None:
        """(transactional id, producer id, epoch), or None outside a transaction."""
        given = (self.transactional_id, self.producer_id, self.producer_epoch)
        if given == (None, None, None):
            if self.base_sequence is not None:
                raise InvalidRequest("base_sequence numbers a batch inside a transaction only")
            return None
        tid, pid, epoch = given
        if tid is None or pid is None or epoch is None:
            raise InvalidRequest(
                "a produce in a transaction names transactional_id, producer_id and "
                "producer_epoch together"
            )
        return tid, pid, epoch


SUBSCRIBE_CLIENT: dict[str, type[_Message]] = {
    "subscribe": Subscribe,
    "credit": CreditGrant,
    "seek": Seek,
    "pause": Pause,
    "resume": Resume,
    "commit": Commit,
    "ping": Ping,
}
SUBSCRIBE_SERVER = frozenset({"subscribed", "records", "error", "pong", "assignment", "commit_ack"})
PRODUCE_CLIENT: dict[str, type[_Message]] = {"produce": Produce, "ping": Ping}
PRODUCE_SERVER = frozenset({"ack", "error", "pong"})


def parse_text(text: str) -> dict[str, Any]:
    """A client message as a dict with a string ``type``; InvalidRequest otherwise."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"malformed JSON message: {exc}") from None
    if type(obj) is not dict:
        raise InvalidRequest(f"a message is a JSON object, got {type(obj).__name__}")
    return obj


def validate(
    obj: Mapping[str, Any], registry: Mapping[str, type[_Message]], default: str | None = None
) -> _Message:
    kind = obj.get("type", default)
    model = registry.get(kind) if isinstance(kind, str) else None
    if model is None:
        raise InvalidRequest(
            f"unknown message type {kind!r}; expected one of {', '.join(sorted(registry))}"
        )
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc, "message") from None


def error_frame(exc: LogbusError, **extra: Any) -> str:
    message = exc.message
    if isinstance(exc, KafkaStorageError):
        message = without_paths(message)  # as in HTTP answers (app.api.errors)
    body: dict[str, Any] = {
        "type": "error",
        "error_code": exc.error_code,
        "message": message,
        "retriable": exc.retriable,
    }
    body.update(exc.fields())
    body.update(extra)
    return orjson.dumps(body, default=str).decode()


def internal_error_frame(exc: BaseException, **extra: Any) -> str:
    if is_storage_error(exc):
        # A failing disk is no bug: the retriable KAFKA_STORAGE_ERROR, as over HTTP.
        assert isinstance(exc, OSError)
        return error_frame(storage_error(exc), **extra)
    body: dict[str, Any] = {
        "type": "error",
        "error_code": "UNKNOWN_SERVER_ERROR",
        "message": f"internal error: {type(exc).__name__}",
        "retriable": False,
    }
    body.update(extra)
    return orjson.dumps(body, default=str).decode()


def binary_header(topic: str, partition: int, high_watermark: int, next_offset: int) -> bytes:
    name = topic.encode()
    return (
        BINARY_MAGIC
        + _TOPIC_LEN.pack(len(name))
        + name
        + _TAIL.pack(partition, high_watermark, next_offset)
    )


def parse_binary_frame(frame: bytes) -> tuple[str, int, int, int, memoryview]:
    """(topic, partition, high_watermark, next_offset, batches): the client side, for tests
    and SDKs."""
    if frame[:4] != BINARY_MAGIC:
        raise ValueError("not a Logbus binary records frame")
    (n,) = _TOPIC_LEN.unpack_from(frame, 4)
    topic = frame[6 : 6 + n].decode()
    partition, hwm, next_offset = _TAIL.unpack_from(frame, 6 + n)
    return topic, partition, hwm, next_offset, memoryview(frame)[6 + n + _TAIL.size :]
