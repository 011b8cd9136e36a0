"""Descriptions, examples and hand-written request/response content for the OpenAPI spec.

Produce and topic-create bodies are read by the endpoints themselves (to
enforce the size limit while reading and to parse JSON in one pass), so
FastAPI does not see them as parameters; their schemas are declared here and
the models are added to the spec's components by ``app.api.app``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute

from app.api.models import (
    FORMAT_DOC,
    CreateTopicRequest,
    InitProducerIdRequest,
    ProduceRequest,
)
from app.core.log.topic_rules import MAX_TOPIC_NAME_LENGTH


class DocumentedRoute(APIRoute):
    """A route documented by its endpoint's docstring, as a Python reader expects: the
    first line is the operation's OpenAPI ``summary``, the paragraphs after the blank line
    its ``description`` (a paragraph's lines joined by one space, paragraphs by a blank
    line, as Markdown reads them). ``summary=``/``description=`` given to the decorator
    win (a description kept in this module)."""

    def __init__(
        self,
        path: str,
        endpoint: Callable[..., Any],
        *,
        summary: str | None = None,
        description: str | None = None,
        **kwargs: Any,
    ) -> None:
        first, _, rest = (inspect.getdoc(endpoint) or "").partition("\n")
        paragraphs = (" ".join(p.split()) for p in rest.strip().split("\n\n"))
        super().__init__(
            path,
            endpoint,
            summary=summary or first.strip() or None,
            # "\f" (FastAPI's cut mark): no description, rather than the whole docstring.
            description=description or "\n\n".join(p for p in paragraphs if p) or "\f",
            **kwargs,
        )


# Models whose schemas the spec needs although no parameter uses them.
BODY_MODELS = (ProduceRequest, CreateTopicRequest, InitProducerIdRequest)


def json_request_body(
    model: str, examples: dict[str, Any], *, required: bool = True
) -> dict[str, Any]:
    """An ``openapi_extra`` JSON request body: ``model``'s schema and named examples."""
    return {
        "requestBody": {
            "required": required,
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{model}"},
                    "examples": examples,
                }
            },
        }
    }


PRODUCE = f"""Append records; the answer carries each record's partition, offset and timestamp
in request order.

Placement: a record's `partition` wins; otherwise a non-null key goes to Kafka's
`toPositive(murmur2(key bytes)) % partitions` (the serialized key: with `key_format=json`
the key `"a"` is the three bytes `"a"` with quotes; use `key_format=string` to match a
Kafka producer with a StringSerializer); records without a key all go to one sticky
partition per request, a different one on the next request. Each partition touched
receives exactly one record batch per request.

Formats: {FORMAT_DOC}

An unknown topic is created with the broker's `num_partitions` when
`auto_create_topics_enable` is on (Kafka's auto.create.topics.enable), otherwise 404.
The body is refused with 413 as soon as it passes the broker's `max_request_bytes`.
Nothing is appended unless the whole request is valid."""

PRODUCE_PARTITION = f"""Append records to one partition; every record goes to the partition
in the path (a record's own `partition`, if given, must agree).

Formats: {FORMAT_DOC}"""

PRODUCE_EXAMPLES: dict[str, Any] = {
    "json": {
        "summary": "JSON values, string keys",
        "value": {
            "records": [
                {"key": "user-42", "value": {"amount": 12.5}},
                {"key": "user-7", "value": {"amount": 3}, "headers": {"source": "web"}},
                {"value": {"note": "no key: sticky partition"}},
            ],
            "key_format": "string",
        },
    },
    "binary": {
        "summary": "Base64 bytes with list headers and a timestamp",
        "value": {
            "records": [
                {
                    "key": "a2V5",
                    "value": "AAEC/w==",
                    "headers": [{"key": "trace", "value": "abc"}],
                    "timestamp": 1700000000000,
                }
            ],
            "key_format": "binary",
            "value_format": "binary",
        },
    },
}

PRODUCE_PARTITION_EXAMPLES: dict[str, Any] = {
    "string": {
        "summary": "Plain strings",
        "value": {"records": [{"value": "hello"}, {"value": "world"}], "value_format": "string"},
    }
}

PRODUCE_BATCHES = """Append one or more Kafka RecordBatch v2 (magic 2) back to back, exactly
as a Kafka producer would send them: the broker checks each batch (CRC-32C, lengths,
magic, record count, max.message.bytes), stamps its base offset and leader epoch in
place, and writes the same bytes. Compressed batches (gzip, snappy, lz4, zstd) are stored
compressed. A corrupt or truncated batch is 400 CORRUPT_MESSAGE and nothing is written;
so is a batch with the delete-horizon flag (attribute bit 6, set only by the broker's
log cleaner: copy records, not cleaned batches), with 400 INVALID_RECORD.
The answer gives each batch's assigned offsets.

Idempotent producers (a producer id from `POST /producers` in the batch header, with
its epoch and a base sequence counting records from 0 per partition): the broker keeps
each producer's last five batches per partition. An exact retry of one of them is not
written again: it answers 200 with the original offsets and `"duplicate": true`. A
sequence gap is 409 OUT_OF_ORDER_SEQUENCE_NUMBER, an epoch older than the newest seen is
409 INVALID_PRODUCER_EPOCH, and a new epoch must start at sequence 0. Either error
leaves the partition unchanged (the whole body is checked before anything is written)."""

BINARY_REQUEST_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "One or more RecordBatch v2, back to back.",
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}

FETCH = f"""Read records from `offset` onwards.

`Accept: application/json` (the default) answers decoded records from `offset` on (a
batch that starts earlier is trimmed) with keys and values rendered per
`key_format`/`value_format`: {FORMAT_DOC} With `json`, stored bytes that are not
valid JSON come back as a string. Header values are UTF-8 strings.

`Accept: application/octet-stream` answers the stored RecordBatch v2 bytes as they are
on disk (sent with sendfile): whole batches, so the first may start before `offset`.
Headers `Logbus-High-Watermark`, `Logbus-Log-Start-Offset`, `Logbus-Log-End-Offset` and
`Logbus-Last-Stable-Offset` come with both answers.

`isolation_level=read_committed` reads only up to the last stable offset (LSO: the first
offset of the oldest transaction still open), so an open transaction holds the reader
there until it commits or aborts. A JSON answer leaves out the records of aborted
transactions; a binary answer carries the whole batches below the LSO and lists the
aborted transactions they overlap in `Logbus-Aborted-Transactions`, as
`producer_id:first_offset` pairs, comma-separated (empty when none): drop a
transactional batch of such a producer from its first offset until that producer's
ABORT control batch, as Kafka's consumer does (the SDK's `Consumer` and the Spark
source do it for you). Control batches (transaction markers) never appear in JSON
answers; in binary answers they come as stored. Either way `next_offset` (JSON) or the
end of the last batch (binary) is where to fetch next, past dropped batches.

When fewer than `min_bytes` are available the request waits up to `max_wait_ms`, and
returns as soon as an append brings enough. `offset` equal to the log end offset is an
empty answer (or a wait); below the log start or past the end it is 416
OFFSET_OUT_OF_RANGE with both bounds."""

_OFFSET_HEADERS: dict[str, Any] = {
    "Logbus-High-Watermark": {
        "description": "Offset after the last committed record.",
        "schema": {"type": "integer"},
    },
    "Logbus-Log-Start-Offset": {
        "description": "First offset in the log.",
        "schema": {"type": "integer"},
    },
    "Logbus-Log-End-Offset": {
        "description": "Offset the next appended record gets.",
        "schema": {"type": "integer"},
    },
    "Logbus-Last-Stable-Offset": {
        "description": "The last stable offset: no record of a transaction still open is "
        "below it; read_committed answers stop there.",
        "schema": {"type": "integer"},
    },
    "Logbus-Aborted-Transactions": {
        "description": "read_committed answers only: the aborted transactions the answer "
        "overlaps, as comma-separated `producer_id:first_offset` pairs (empty: none).",
        "schema": {"type": "string", "example": "4001:120,4007:133"},
    },
}

ISOLATION_LEVEL = """Kafka's isolation level. `read_uncommitted` (the default, as Kafka's
consumer): every record up to the high watermark, whatever its transaction. `read_committed`:
records up to the last stable offset only, without those of aborted transactions (JSON), or
with the aborted transactions listed in `Logbus-Aborted-Transactions` (binary)."""

FETCH_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Records (JSON) or raw record batches (octet-stream).",
        "headers": _OFFSET_HEADERS,
        "content": {
            "application/json": {
                "example": {
                    "topic": "orders",
                    "partition": 0,
                    "high_watermark": 3,
                    "last_stable_offset": 3,
                    "log_start_offset": 0,
                    "next_offset": 3,
                    "records": [
                        {
                            "offset": 2,
                            "timestamp": 1700000000000,
                            "key": "user-42",
                            "value": {"amount": 12.5},
                            "headers": [{"key": "source", "value": "web"}],
                        }
                    ],
                }
            },
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}

LIST_OFFSETS = """Kafka's ListOffsets. `at=earliest` gives the log start offset, `at=latest`
the high watermark (the offset the next record gets), and a timestamp in ms the first
offset whose record timestamp is at or after it, with that timestamp; `offset` -1 and
`timestamp` -1 when there is none (as Kafka answers). A leader elected moments ago whose
high watermark has not caught up with the start of its leader epoch yet answers `latest`,
and a timestamp it finds nothing for, with a retriable 503 OFFSET_NOT_AVAILABLE (Kafka's
rule) rather than an end that would go backwards; `earliest` is always answered."""

CREATE_TOPIC = f"""Create a topic with `partitions` partitions (default: the broker's
`num_partitions`) and Kafka-named config overrides. Names are 1-{MAX_TOPIC_NAME_LENGTH}
characters of ASCII letters, digits, `.`, `_` and `-` (the limit keeps every file name
the topic needs within the filesystem's 255 bytes). Errors: 400 INVALID_TOPIC_EXCEPTION,
INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR (this broker keeps one copy) or
INVALID_CONFIG (unknown name or bad value; the body names the config), 409
TOPIC_ALREADY_EXISTS. More partitions than the broker can keep open (per topic, in total,
or in file descriptors left) is 400 INVALID_PARTITIONS whose `setting` names the limit;
the check comes before anything is written, and a create that fails half-way (503
KAFKA_STORAGE_ERROR) leaves nothing behind. The answer is the new topic's description.
In a cluster it comes once every partition has a leader, up to `timeout_ms` (default
30000; then 504 REQUEST_TIMED_OUT: the topic is created, do not create it again; 0: at
once after the write, as Kafka's CreateTopics)."""

CREATE_TOPIC_EXAMPLES: dict[str, Any] = {
    "simple": {"summary": "Three partitions", "value": {"name": "orders", "partitions": 3}},
    "configs": {
        "summary": "With config overrides",
        "value": {
            "name": "clicks",
            "partitions": 6,
            "replication_factor": 1,
            "configs": {"retention.ms": 3600000, "segment.bytes": 104857600},
        },
    },
}

INIT_PRODUCER_ID = """Kafka's InitProducerId for idempotent producers: a producer id,
unique for the life of this broker's data dir (ids are reserved in blocks on disk, so a
restart never hands one out twice), with epoch 0. The producer puts the id, the epoch
and a per-partition sequence into every batch header it sends to
`/topics/{topic}/partitions/{partition}/batches`.

With `producer_id` and `producer_epoch` the same id comes back with the epoch bumped
(KIP-360): the way out of OUT_OF_ORDER_SEQUENCE_NUMBER, after which the producer starts
every partition again at sequence 0 and batches with the old epoch are fenced. When the
epoch is exhausted (32767) a new id with epoch 0 is answered instead. An id this broker
never issued is 400 UNKNOWN_PRODUCER_ID. An empty body is the same as `{}`.

With a `transactional_id` (and `transaction_timeout_ms`, default 60000, at most the
broker's `transaction_max_timeout_ms`) this is the transactional producer's
InitProducerId, answered by the id's transaction coordinator: a new id gets a producer id
and epoch 0; a known one keeps its producer id with the epoch bumped, which fences every
older instance (their transactional writes answer 409 PRODUCER_FENCED or
INVALID_PRODUCER_EPOCH). An open transaction of the old instance is aborted first.
Errors: 400 INVALID_TRANSACTION_TIMEOUT, 409 CONCURRENT_TRANSACTIONS (retriable: the
previous transaction is still being completed), 409 PRODUCER_FENCED (a bump asked with an
older epoch), 421 NOT_COORDINATOR (cluster: another broker coordinates the id)."""

INIT_PRODUCER_ID_EXAMPLES: dict[str, Any] = {
    "new": {"summary": "A new producer id", "value": {}},
    "bump": {
        "summary": "Bump the epoch of an existing id",
        "value": {"producer_id": 1000, "producer_epoch": 0},
    },
    "transactional": {
        "summary": "A transactional producer (fences older instances of the id)",
        "value": {"transactional_id": "orders-copier-0", "transaction_timeout_ms": 60000},
    },
}

DESCRIBE_TOPIC = """Partitions with their leader, replicas and in-sync replicas (broker
ids), log start offset, high watermark and log end offset, and every effective topic
config under its Kafka name (`config_overrides` lists the ones set on this topic). With an
authorizer, describing needs DESCRIBE on the topic, and the configs are shown only to a
principal with DESCRIBE_CONFIGS (implied by ALTER_CONFIGS); others get them empty."""

METADATA = """Kafka's Metadata: the cluster id, the brokers (`id`, `url`), the controller's broker id,
and every topic's partitions with leader, replicas, in-sync replicas and offline replicas
(on brokers that are down, or that could not create their replica: every broker lists
every broker's).

`?topics=a,b` narrows the answer to those topics (missing ones are left out). With
`allow_auto_topic_creation=true` and the broker's `auto_create_topics_enable` on, missing
requested topics are created first with `num_partitions` partitions, as Kafka's producers
ask for: a client can learn a new topic's partition count before its first produce. An
invalid name then answers 400 INVALID_TOPIC_EXCEPTION and nothing is created."""
