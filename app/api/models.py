"""Request and response bodies of the v1 HTTP API (the OpenAPI schemas).

Request models are strict (``"3"`` is not a partition number) and forbid
unknown fields, so a typo like ``"vlaue"`` is a 400 naming the field rather
than a silently empty record. Responses are serialized with orjson straight
from dicts on the hot paths; the response models here document them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from app.core.log.topic_rules import MAX_TOPIC_NAME_LENGTH

Format = Literal["json", "string", "binary"]
# The formats of HTTP JSON produce and fetch: Format, and the schema-typed ones (records in
# Confluent's wire format, schemas from the registry: app/api/typed.py).
RecordFormat = Literal["json", "string", "binary", "avro", "jsonschema", "protobuf"]
TYPED_FORMATS = ("avro", "jsonschema", "protobuf")

# Kafka's wire types (int16 epochs, int32 partitions, int64 ids, offsets, timestamps).
# Kept here rather than imported from app.api.util, which imports the routers' world.
SHORT_MAX = (1 << 15) - 1
INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1

FORMAT_DOC = (
    "`json` (default): any JSON value, stored as its JSON text; `string`: a string stored "
    "as UTF-8; `binary`: base64 (standard alphabet) of the bytes. JSON `null` always means "
    "no key / no value (a tombstone), whatever the format."
)
TYPED_FORMAT_DOC = (
    " `avro`, `jsonschema`, `protobuf`: a JSON value validated against a registered schema "
    "(`*_schema_id`, or `*_subject` and `*_schema_version`) and stored in Confluent's wire "
    "format (magic byte 0, the 4-byte schema id, the payload)."
)
SCHEMA_ID_MAX = INT_MAX


class StrictBody(BaseModel):
    """A request body: no type coercion ("1" is not 1), no unknown fields (a typo is a 400,
    not an option silently ignored)."""

    model_config = ConfigDict(strict=True, extra="forbid")


class Header(StrictBody):
    key: str = Field(description="Header name.")
    value: str | None = Field(default=None, description="Header value as a UTF-8 string.")


class ProduceRecord(StrictBody):
    key: Any = Field(
        default=None,
        description="Record key, rendered per `key_format`. Keys place records on partitions "
        "with Kafka's murmur2 over the serialized key bytes; null keys go to a sticky partition.",
        examples=["user-42"],
    )
    value: Any = Field(
        default=None,
        description="Record value, rendered per `value_format`.",
        examples=[{"amount": 12.5}],
    )
    headers: list[Header] | dict[str, str | None] | None = Field(
        default=None,
        description='Either a list `[{"key": "k", "value": "v"}]` (ordered, duplicates allowed) '
        'or an object `{"k": "v"}`. Values are UTF-8 strings or null.',
    )
    partition: int | None = Field(
        default=None,
        ge=0,
        le=INT_MAX,
        description="Send this record to this partition instead of letting the partitioner pick.",
    )
    timestamp: int | None = Field(
        default=None,
        ge=0,
        le=LONG_MAX,
        description="CreateTime in ms since the epoch; default: when the broker received it.",
    )

    @field_validator("headers", mode="wrap")
    @classmethod
    def _one_headers_error(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # A union reports one error per member; one sentence reads better.
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(
                'expected a list of {"key": string, "value": string or null} objects '
                "or an object of string (or null) values"
            ) from None


class ProduceRequest(StrictBody):
    records: list[ProduceRecord] = Field(min_length=1, description="One or more records.")
    key_format: RecordFormat = Field(default="json", description=FORMAT_DOC + TYPED_FORMAT_DOC)
    value_format: RecordFormat = Field(default="json", description=FORMAT_DOC + TYPED_FORMAT_DOC)
    key_schema_id: int | None = Field(
        default=None, ge=0, le=SCHEMA_ID_MAX, description="Typed `key_format`: the schema id."
    )
    key_subject: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="Typed `key_format`: the subject whose version encodes the keys.",
    )
    key_schema_version: int | None = Field(
        default=None,
        ge=1,
        le=SCHEMA_ID_MAX,
        description="With `key_subject`: the version (default: the latest).",
    )
    value_schema_id: int | None = Field(
        default=None, ge=0, le=SCHEMA_ID_MAX, description="Typed `value_format`: the schema id."
    )
    value_subject: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="Typed `value_format`: the subject whose version encodes the values "
        "(e.g. `orders-value`).",
    )
    value_schema_version: int | None = Field(
        default=None,
        ge=1,
        le=SCHEMA_ID_MAX,
        description="With `value_subject`: the version (default: the latest).",
    )
    key_message: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="`key_format` protobuf: the message of the schema's file the keys are "
        "(its full name, or relative to the file's package; default: the file's first). "
        "Written with its message indexes, as Confluent's serializers do.",
    )
    value_message: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="`value_format` protobuf: the message of the schema's file the values "
        "are (its full name, or relative to the file's package; default: the file's "
        "first). Written with its message indexes, as Confluent's serializers do.",
    )

    @model_validator(mode="after")
    def _schema_fields_match_formats(self) -> ProduceRequest:
        for side in ("key", "value"):
            typed = getattr(self, f"{side}_format") in TYPED_FORMATS
            schema_id = getattr(self, f"{side}_schema_id")
            subject = getattr(self, f"{side}_subject")
            version = getattr(self, f"{side}_schema_version")
            if not typed and (schema_id is not None or subject is not None or version is not None):
                raise ValueError(
                    f"{side}_schema_id, {side}_subject and {side}_schema_version go with a "
                    f"typed {side}_format (avro, jsonschema, protobuf)"
                )
            if typed and (schema_id is None) == (subject is None):
                raise ValueError(
                    f"{side}_format {getattr(self, f'{side}_format')} needs exactly one of "
                    f"{side}_schema_id and {side}_subject"
                )
            if version is not None and subject is None:
                raise ValueError(f"{side}_schema_version goes with {side}_subject")
            if getattr(self, f"{side}_message") is not None and (
                getattr(self, f"{side}_format") != "protobuf"
            ):
                raise ValueError(f"{side}_message goes with {side}_format protobuf")
        return self

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "records": [
                        {"key": "user-42", "value": {"amount": 12.5}},
                        {"key": "user-7", "value": {"amount": 3}, "headers": {"source": "web"}},
                        {"value": "no key: sticky partition"},
                    ],
                    "key_format": "string",
                    "value_format": "json",
                }
            ]
        },
    )


class ProducedOffset(BaseModel):
    partition: int
    offset: int
    timestamp: int = Field(
        description="The record's timestamp: its CreateTime, or the broker's append time "
        "when the topic uses message.timestamp.type=LogAppendTime."
    )


class ProduceResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "offsets": [
                        {"partition": 2, "offset": 41, "timestamp": 1700000000000},
                        {"partition": 0, "offset": 7, "timestamp": 1700000000000},
                    ]
                }
            ]
        }
    )

    offsets: list[ProducedOffset] = Field(description="One entry per record, in request order.")


class AppendedBatch(BaseModel):
    base_offset: int
    last_offset: int
    record_count: int
    duplicate: bool = Field(
        description="True when the batch is an idempotent producer's retry of a batch the "
        "partition already holds: it was not written again and the offsets are the original "
        "ones."
    )


class BatchProduceResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "topic": "orders",
                    "partition": 0,
                    "batches": [
                        {
                            "base_offset": 100,
                            "last_offset": 149,
                            "record_count": 50,
                            "duplicate": False,
                        },
                        {
                            "base_offset": 150,
                            "last_offset": 151,
                            "record_count": 2,
                            "duplicate": False,
                        },
                    ],
                    "log_append_time": -1,
                    "log_start_offset": 0,
                }
            ]
        }
    )

    topic: str
    partition: int
    batches: list[AppendedBatch] = Field(description="One entry per batch, in body order.")
    log_append_time: int = Field(description="-1 unless the topic uses LogAppendTime.")
    log_start_offset: int


class InitProducerIdRequest(StrictBody):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {},
                {"transactional_id": None},
                {"producer_id": 1000, "producer_epoch": 0},
                {"transactional_id": "orders-copier-0", "transaction_timeout_ms": 60000},
            ]
        },
    )

    transactional_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="Kafka's transactional.id: get (or fence and take over) the id's "
        "transactional producer. Null or absent: an idempotent producer.",
    )
    transaction_timeout_ms: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 1,
        description="With `transactional_id`: Kafka's transaction.timeout.ms (default 60000): "
        "a transaction open longer is aborted by the broker and its producer fenced.",
    )
    producer_id: int | None = Field(
        default=None,
        ge=0,
        le=LONG_MAX,
        description="With `producer_epoch`: bump this producer's epoch instead of getting a "
        "new id (after OUT_OF_ORDER_SEQUENCE_NUMBER, like Kafka's KIP-360).",
    )
    producer_epoch: int | None = Field(
        default=None,
        ge=0,
        le=SHORT_MAX,
        description="The producer's current epoch; required with `producer_id`.",
    )


class InitProducerIdResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"producer_id": 1000, "producer_epoch": 0}]}
    )

    producer_id: int = Field(
        description="Unique for the life of this broker's data dir (never reused, also "
        "across restarts)."
    )
    producer_epoch: int = Field(description="0 for a new id; the bumped epoch otherwise.")


class FetchedHeader(BaseModel):
    key: str
    value: str | None = Field(description="UTF-8 decoded (invalid bytes become U+FFFD).")


class FetchedRecord(BaseModel):
    offset: int
    timestamp: int
    key: Any = Field(description="Rendered per `key_format`.")
    value: Any = Field(description="Rendered per `value_format`.")
    headers: list[FetchedHeader]


class FetchResponse(BaseModel):
    topic: str
    partition: int
    high_watermark: int
    last_stable_offset: int = Field(
        description="The last stable offset: the first offset of the oldest transaction "
        "still open (the high watermark when none is); read_committed answers stop there."
    )
    log_start_offset: int
    next_offset: int = Field(description="The offset to fetch next.")
    records: list[FetchedRecord]


class OffsetAnswer(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"examples": [{"offset": 1234, "timestamp": 1700000000000}]}
    )

    offset: int = Field(description="-1 when no record has a timestamp at or after `at`.")
    timestamp: int = Field(description="The found record's timestamp; -1 for earliest/latest.")


def _timeout_ms(waits_for: str, made: str, more: str = "") -> Any:
    """The ``timeout_ms`` of a topic change's body (Kafka's): how long a cluster waits."""
    return Field(
        default=30_000,
        ge=0,
        le=INT_MAX,
        description=f"In a cluster, how long to wait for {waits_for} (else 504 "
        f"REQUEST_TIMED_OUT: {made} and stays); 0 answers at once after the write, as "
        f"Kafka's timeout_ms{more}.",
    )


class CreateTopicRequest(StrictBody):
    name: str = Field(
        description=f"1-{MAX_TOPIC_NAME_LENGTH} characters of ASCII letters, digits, '.', '_' "
        "and '-'; not '.' or '..'.",
        examples=["orders"],
    )
    partitions: int | None = Field(
        default=None, description="Number of partitions; default: the broker's num_partitions."
    )
    replication_factor: int | None = Field(
        default=None, description="Copies of each partition; this broker supports 1 (or -1)."
    )
    configs: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Topic config overrides with Kafka's names, e.g. retention.ms.",
        examples=[{"retention.ms": 3600000, "cleanup.policy": "delete"}],
    )
    timeout_ms: int = _timeout_ms(
        "every partition to have a leader",
        "the topic is created",
        ", with the partitions this broker does not know yet shown without leader or replicas",
    )

    @field_validator("configs", mode="wrap")
    @classmethod
    def _one_configs_error(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(
                "expected an object of config name to string, number or boolean"
            ) from None


class CreatePartitionsRequest(StrictBody):
    count: int = Field(
        description="The topic's new partition count: above its current one (partitions "
        "are only ever added).",
        examples=[6],
    )
    validate_only: bool = Field(
        default=False, description="Check only (Kafka's validate_only): nothing changes."
    )
    timeout_ms: int = _timeout_ms(
        "every partition, the new ones too, to have a leader", "the change is made"
    )


class AlterTopicConfigsRequest(StrictBody):
    configs: dict[str, str | int | float | bool] = Field(
        description="The topic's config overrides, Kafka's names: they replace the current "
        "ones (a config not named returns to the broker's default), as Kafka's AlterConfigs.",
        examples=[{"retention.ms": 3600000, "cleanup.policy": "compact,delete"}],
    )
    validate_only: bool = Field(
        default=False, description="Check only (Kafka's validate_only): nothing changes."
    )
    timeout_ms: int = _timeout_ms("this broker to apply the new overrides", "the change is made")


class DeleteRecordsAnswer(BaseModel):
    low_watermark: int = Field(
        description="The partition's log start offset after the deletion; in a cluster "
        "Kafka's low watermark: the smallest start over the live replicas."
    )


class PartitionDescription(BaseModel):
    partition: int
    leader: int = Field(description="Broker id of the leader; -1 while there is none.")
    leader_epoch: int = Field(default=0, description="Bumped on every leader change.")
    replicas: list[int]
    isr: list[int] = Field(description="In-sync replicas: they hold every committed record.")
    offline_replicas: list[int] = Field(
        default_factory=list,
        description="Replicas on brokers that are down or that could not create their "
        "replica (reported offline in ZooKeeper), whichever broker they are on.",
    )
    log_start_offset: int | None = Field(
        description="As this broker's replica sees it; null where it holds no replica."
    )
    high_watermark: int | None
    log_end_offset: int | None


class TopicDescription(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "orders",
                    "partitions": [
                        {
                            "partition": 0,
                            "leader": 0,
                            "replicas": [0],
                            "isr": [0],
                            "log_start_offset": 0,
                            "high_watermark": 42,
                            "log_end_offset": 42,
                        }
                    ],
                    "configs": {"retention.ms": 3600000, "cleanup.policy": "delete"},
                    "config_overrides": {"retention.ms": 3600000},
                }
            ]
        }
    )

    name: str
    partitions: list[PartitionDescription]
    configs: dict[str, Any] = Field(description="Every effective topic config, Kafka names.")
    config_overrides: dict[str, Any] = Field(
        description="The configs set on this topic (the rest are broker defaults)."
    )


class TopicSummary(BaseModel):
    name: str
    partitions: int


class TopicList(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "topics": [
                        {"name": "clicks", "partitions": 6},
                        {"name": "orders", "partitions": 3},
                    ]
                }
            ]
        }
    )

    topics: list[TopicSummary]


class Broker(BaseModel):
    id: int
    url: str


class PartitionMetadata(BaseModel):
    partition: int
    leader: int = Field(description="Broker id of the leader; -1 while there is none.")
    leader_epoch: int = Field(default=0, description="Bumped on every leader change.")
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = Field(
        default_factory=list,
        description="Replicas on brokers that are down or that could not create their "
        "replica (reported offline in ZooKeeper), whichever broker they are on.",
    )


class TopicMetadata(BaseModel):
    name: str
    partitions: list[PartitionMetadata]


class Metadata(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "cluster_id": "Cq3sNa8TQ0SUkJ0G7ZbNxg",
                    "brokers": [{"id": 0, "url": "http://127.0.0.1:8080"}],
                    "controller": 0,
                    "topics": [
                        {
                            "name": "orders",
                            "partitions": [
                                {"partition": 0, "leader": 0, "replicas": [0], "isr": [0]}
                            ],
                        }
                    ],
                }
            ]
        }
    )

    cluster_id: str = Field(
        description="Identifies the cluster; fixed when the data dir is created."
    )
    brokers: list[Broker]
    controller: int
    topics: list[TopicMetadata]


class Status(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})

    status: str


class EpochEndOffset(BaseModel):
    """OffsetsForLeaderEpoch answer."""

    leader_epoch: int = Field(description="Largest known epoch <= the one asked; -1 if none.")
    end_offset: int = Field(description="Where that epoch ends; -1 if unknown.")
