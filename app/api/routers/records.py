"""Produce: JSON records (the broker builds the batches) and raw RecordBatch v2 bytes.

A JSON produce request becomes exactly one RecordBatch per partition it
touches: records are encoded and placed in one pass, each partition's
batch is built once, every batch is checked against max.message.bytes
before anything is appended (a bad request leaves every log unchanged), and
the request's appends are made on the event loop when they are small
(``inline_append_max_bytes``) and no partition fsyncs per append, else with one
hop to a worker thread (an append may then fsync or copy megabytes). Requests to
one partition are group-committed (:mod:`app.api.group_commit`): on a worker thread,
those arriving while a write is in flight share the next one; on the loop
(``group_commit_inline``), those of one loop turn; each is answered with its own
offsets. On a lone broker, small requests to several partitions join each
partition's group of the turn too (``group_commit_partitions``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import crc32c
import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api import typed
from app.api.codec import ENCODERS, FRAMED, BodyInvalid, FormatError, encode_headers
from app.api.deps import ManagerDep, StateDep, read_body, read_body_mutable
from app.api.errors import (
    RecordRefused,
    error_responses,
    producer_conflict_doc,
    schema_validation_doc,
)
from app.api.lean_route import LeanRoute
from app.api.models import BatchProduceResponse, ProduceResponse
from app.api.produce_body import ParsedProduce, parse_produce_body
from app.api.produce_service import (
    ACKS_ALL,
    Target,
    append_work,
    appends_inline,
    await_replicas,
    check_replicas,
    leader_target,
    produce_raw,
)
from app.api.schema_validation import NO_VALIDATION
from app.api.state import AppState
from app.api.util import (
    INT_MAX,
    JSONBytes,
    PartitionPath,
    TopicPath,
    TopicPlan,
    create_planned,
    plan_topic,
)
from app.common.batch import (
    BatchBuilder,
    iter_headers,
)
from app.common.errors import (
    InvalidRequiredAcks,
    RecordTooLarge,
    UnknownTopicOrPartition,
)
from app.common.native import optional
from app.common.partitioner import key_hash, partition_for_key

if TYPE_CHECKING:
    from app.common import _jsonrecords


# The broker's C helpers (app/common/_jsonrecords.c): without them, the Python loop.
plain_records: _jsonrecords.PlainRecords | None = optional(
    "app.common._jsonrecords", "plain_records"
)
offsets_json: _jsonrecords.OffsetsJson | None = optional("app.common._jsonrecords", "offsets_json")

_PARTITION = itemgetter(0)  # of a placed record: (partition, index in its batch, timestamp)
# A batch over this is refused (BatchBuilder's own max_bytes, 1 GiB).
MAX_BATCH_BYTES = 1 << 30

if TYPE_CHECKING:
    from app.core.log.manager import LogManager

# LeanRoute: plain parameters are read without FastAPI's dependency solver (hot path).
router = APIRouter(tags=["produce"], route_class=LeanRoute)

AcksQuery = Annotated[
    str,
    Query(
        description="`0`: answer 204 once appended, no body; `1`: answer after the leader "
        "appended; `all` (or `-1`): after every in-sync replica has it (with one broker, "
        "the same as 1).",
        examples=["1"],
        json_schema_extra={"enum": ["0", "1", "all", "-1"]},
    ),
]
TimeoutQuery = Annotated[
    int,
    Query(
        ge=1,
        le=INT_MAX,
        description="acks=all: how long to wait (ms) for every in-sync replica before "
        "answering 504 REQUEST_TIMED_OUT; the write may still be replicated then. As in "
        "Kafka, the leader's own append is not bounded by it: acks=0 and acks=1 never "
        "answer 504.",
    ),
]


def parse_acks(acks: str) -> int:
    value = {"0": 0, "1": 1, "all": -1, "-1": -1}.get(acks.strip().lower())
    if value is None:
        raise InvalidRequiredAcks(f"acks must be 0, 1 or all (-1), got {acks!r}")
    return value


def _joins_partitions(state: AppState, work: Sequence[tuple[Target, bytes | bytearray]]) -> bool:
    """Whether a small request to several partitions, appended on the loop, joins each
    partition's group of the loop turn (:meth:`GroupCommit.append_partitions`): with
    ``group_commit_inline`` and ``group_commit_partitions``, on a lone broker only
    (leadership never moves there, so separate appends keep the all-or-none rule of
    the leadership checks), and not for a compacted topic, whose log refuses keyless
    records at the append: such a request keeps its one sequential append, which
    stops at the refused partition."""
    settings = state.settings
    return (
        settings.group_commit_inline
        and settings.group_commit_partitions
        and not state.topology.leadership_moves
        and not work[0][0].log.config.compact
    )


def build_batches(
    req: ParsedProduce,
    num_partitions: int,
    fixed_partition: int | None,
    sticky_partition: Callable[[], int],
    now_ms: int,
) -> tuple[dict[int, BatchBuilder], list[tuple[int, int, int]]]:
    """One batch per partition, and per record (partition, index in its batch, timestamp).

    Partitions are not range-checked here beyond what placement needs; the
    caller checks the partitions that got a batch, once each.
    """
    if fixed_partition is None and req.key_format == req.value_format:
        # json, or both sides already bytes (a typed produce, app/api/typed.py), taken as
        # they are.
        encode = _PLAIN_ENCODERS.get(req.key_format)
        if encode is not None:
            fast = _plain_json_batches(req, num_partitions, sticky_partition, now_ms, encode)
            if fast is not None:
                return fast
    encode_key = ENCODERS[req.key_format]
    encode_value = ENCODERS[req.value_format]
    # The default format, json, encoded in the loop (as codec's json encoder does): an
    # encoder call per key and per value cost more than the encoding.
    json_key = req.key_format == "json"
    json_value = req.value_format == "json"
    dumps = orjson.dumps
    sticky: int | None = None
    builders: dict[int, BatchBuilder] = {}
    counts: dict[int, int] = {}
    placed: list[tuple[int, int, int]] = []
    field = "key"
    try:
        for raw_key, raw_value, raw_headers, p, timestamp in req.records:
            field = "key"
            if not json_key:
                key = encode_key(raw_key)
            else:
                key = None if raw_key is None else dumps(raw_key)
            field = "value"
            if not json_value:
                value = encode_value(raw_value)
            else:
                value = None if raw_value is None else dumps(raw_value)
            field = "headers"
            headers = encode_headers(raw_headers) if raw_headers else []
            if fixed_partition is not None:
                if p is not None and p != fixed_partition:
                    field = "partition"
                    raise FormatError(f"{p} disagrees with partition {fixed_partition} in the path")
                p = fixed_partition
            elif p is None:
                if key is None:
                    if sticky is None:
                        sticky = sticky_partition()
                    p = sticky
                else:
                    p = partition_for_key(key, num_partitions)
            builder = builders.get(p)
            if builder is None:
                builder = builders[p] = BatchBuilder()
                counts[p] = 0
            ts = now_ms if timestamp is None else timestamp
            placed.append((p, counts[p], ts))
            counts[p] += 1
            if not builder.append(value, key, headers, ts):
                raise RecordTooLarge(builder.size_in_bytes(), 1 << 30, what="record batch")
    except FormatError as exc:
        # Every record before the bad one was placed: its index is their count.
        raise BodyInvalid.at(f"body.records.{len(placed)}.{field}", str(exc)) from None
    except orjson.JSONEncodeError as exc:
        # A json key or value encoded in the loop: the words of codec's json encoder.
        raise BodyInvalid.at(
            f"body.records.{len(placed)}.{field}", f"{exc} (format json)"
        ) from None
    return builders, placed


def _bytes_as_they_are(value: bytes) -> bytes:
    return value


# The formats whose bodies the plain path takes, and how it encodes their keys and values.
_PLAIN_ENCODERS: dict[str, Callable[[Any], bytes]] = {
    "json": orjson.dumps,
    FRAMED: _bytes_as_they_are,
}


def _plain_json_batches(
    req: ParsedProduce,
    num_partitions: int,
    sticky_partition: Callable[[], int],
    now_ms: int,
    encode: Callable[[Any], bytes] = orjson.dumps,
) -> tuple[dict[int, BatchBuilder], list[tuple[int, int, int]]] | None:
    """:func:`build_batches` for the usual body, in one pass and one codec call per
    batch: json keys and values (``encode``: orjson.dumps; or a typed produce's keys and
    values already bytes, ``encode`` taking them as they are), records with no headers,
    partition or timestamp, no
    partition in the path. None as soon as a record is not that (nothing is kept: the
    general loop starts over and judges it). Records are grouped by partition here and
    each partition's batch is built with one :meth:`BatchBuilder.extend`; the general
    loop's per-record work (format dispatch, field tracking for error paths, the
    builder's Python ``append``) cost about as much as the codec.

    Where the broker's C helper is built (``app.common._jsonrecords``, setup.py), this
    whole loop is one C call: the same bytes and placements
    (tests/unit/api/test_produce_batches.py compares them)."""
    if plain_records is not None:
        # Encoding (orjson), placement (murmur2 or the one sticky partition), the record
        # layout, and each partition's header and CRC-32C, in C.
        try:
            done = plain_records(
                req.records, num_partitions, now_ms, encode, sticky_partition, crc32c.crc32c
            )
        except orjson.JSONEncodeError:
            return None  # the general loop names the field
        return None if done is None else _prebuilt(*done)
    dumps = encode
    sticky: int | None = None
    rows: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    placed: list[tuple[int, int, int]] = []
    for raw_key, raw_value, raw_headers, p, timestamp in req.records:
        if raw_headers or p is not None or timestamp is not None:
            return None
        try:
            value = None if raw_value is None else dumps(raw_value)
            if raw_key is None:
                key = None
                if sticky is None:
                    sticky = sticky_partition()
                p = sticky
            else:
                key = dumps(raw_key)  # bytes: key_hash is partition_for_key's hash
                p = key_hash(key) % num_partitions
        except orjson.JSONEncodeError:
            return None  # the general loop names the field
        found = rows.get(p)
        if found is None:
            found = rows[p] = []
        placed.append((p, len(found), now_ms))
        found.append((key, value))
    builders: dict[int, BatchBuilder] = {}
    for p, batch_rows in rows.items():
        builder = builders[p] = BatchBuilder()
        if not builder.extend(batch_rows, now_ms):
            raise RecordTooLarge(builder.size_in_bytes(), 1 << 30, what="record batch")
    return builders, placed


def _prebuilt(
    batches: dict[int, tuple[bytes, int]], placed: list[tuple[int, int, int]]
) -> tuple[dict[int, BatchBuilder], list[tuple[int, int, int]]]:
    """The C helper's answer (each partition's batch bytes and record count, and the
    placements) as :func:`_plain_json_batches` answers it."""
    builders: dict[int, BatchBuilder] = {}
    for p, (batch, count) in batches.items():
        if len(batch) > MAX_BATCH_BYTES:
            raise RecordTooLarge(len(batch), MAX_BATCH_BYTES, what="record batch")
        builders[p] = BatchBuilder.prebuilt(batch, count)
    return builders, placed


def _plan_batches(
    state: AppState,
    topic: str,
    req: ParsedProduce,
    plan: TopicPlan,
    fixed_partition: int | None,
    now_ms: int,
) -> tuple[dict[int, bytes], list[tuple[int, int, int]]]:
    """The request's batch per partition, each checked against the topic before any append."""
    n = plan.partitions
    if fixed_partition is not None and not 0 <= fixed_partition < n:
        raise UnknownTopicOrPartition(topic, fixed_partition)
    builders, placed = build_batches(
        req, n, fixed_partition, lambda: state.sticky.next_partition(topic, n), now_ms
    )
    return checked_batches(topic, n, builders, lambda p: plan.max_message_bytes), placed


def checked_batches(
    topic: str, partitions: int, builders: dict[int, BatchBuilder], max_bytes: Callable[[int], int]
) -> dict[int, bytes]:
    """Each partition's batch built, checked before any append: UNKNOWN_TOPIC_OR_PARTITION
    for a partition the topic (``partitions`` of them) lacks, RECORD_TOO_LARGE for one
    over ``max_bytes(partition)`` (its max.message.bytes)."""
    batches: dict[int, bytes] = {}
    for p, builder in builders.items():
        if p >= partitions:
            raise UnknownTopicOrPartition(topic, p)
        data = builder.build()
        limit = max_bytes(p)
        if len(data) > limit:
            raise RecordTooLarge(len(data), limit, what=f"record batch for {topic}-{p}")
        batches[p] = data
    return batches


async def check_schema_ids(
    state: AppState,
    topic: str,
    sides: tuple[bool, bool],
    batches: dict[int, bytes],
    placed: list[tuple[int, int, int]],
) -> None:
    """Broker-side schema validation of a JSON produce's built batches
    (app/api/schema_validation.py): 422 RecordRefused naming the request's record (its
    index in ``records``, mapped back from its partition and place in that batch)."""
    for p in sorted(batches):
        refusal = await state.schema_validation.find_refusal(topic, sides, batches[p])
        if refusal is not None:
            index = next(
                i for i, (pp, j, _) in enumerate(placed) if pp == p and j == refusal.record
            )
            raise RecordRefused(index, refusal.field, "", refusal.reason)


async def append_json_records(
    state: AppState,
    manager: LogManager,
    topic: str,
    req: ParsedProduce,
    timeout_ms: int,
    fixed_partition: int | None,
    inline_max_bytes: int | None = None,
    required_acks: int = 1,
) -> list[dict[str, int]] | orjson.Fragment:
    """Append a parsed JSON produce request; each record's partition, offset and
    timestamp in request order, as a list of dicts or that list already rendered (an
    ``orjson.Fragment``: both callers render the answer with orjson). Shared by HTTP
    produce and ``WS /ws/produce``.

    Requests up to ``inline_max_bytes`` of batches (default: the
    ``inline_append_max_bytes`` setting) are appended on the event loop when no
    partition fsyncs per append (flush.messages), others on a worker thread. Requests
    to one partition go through group commit (:mod:`app.api.group_commit`) when they
    go to a worker thread, and on the loop too with ``group_commit_inline``."""
    if inline_max_bytes is None:
        inline_max_bytes = state.settings.inline_append_max_bytes
    now_ms = int(time.time() * 1000)
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    plan = plan_topic(state, manager, topic)
    while True:
        batches, placed = _plan_batches(state, topic, req, plan, fixed_partition, now_ms)
        if plan.exists:
            break
        # Every check passed against the planned topic: only now create it. A
        # concurrent create with another partition count means placing again.
        created = await create_planned(state, manager, topic)
        if created == plan.partitions:
            break
        plan = plan_topic(state, manager, topic)

    if plan.schema_validation != NO_VALIDATION:
        await check_schema_ids(state, topic, plan.schema_validation, batches, placed)
    order = sorted(batches)
    work = [(leader_target(state, topic, p), batches[p]) for p in order]
    # Records per partition, counted in C (Counter over map: no Python step per record).
    counts: dict[int, int] = Counter(map(_PARTITION, placed)) if len(order) > 1 else {}
    for target, _ in work:
        check_replicas(target, required_acks)

    # acks=all waits for the in-sync replicas anyway: its append takes the worker thread
    # (and group commit), so a leader/ISR lock contended by a leadership change, or a
    # slow disk, never holds the event loop.
    inline = required_acks != ACKS_ALL and appends_inline(work, inline_max_bytes)
    if len(work) == 1 and (not inline or state.settings.group_commit_inline):
        target, data = work[0]
        info = await state.group_commit.append(
            state.topology,
            target.replica,
            target.epoch,
            data,
            len(placed),
            acks_all=required_acks == ACKS_ALL,
            off_loop=not inline,
        )
        infos = [info]
    elif inline and len(work) > 1 and _joins_partitions(state, work):
        infos = await state.group_commit.append_partitions(
            state.topology,
            [
                (t.replica, t.epoch, data, counts[p])
                for (t, data), p in zip(work, order, strict=True)
            ],
        )
    else:
        infos = await append_work(
            state.topology, work, required_acks, inline_max_bytes if inline else 0
        )
    appended = dict(zip(order, infos, strict=True))
    await await_replicas(
        [(target, info) for (target, _), info in zip(work, infos, strict=True)],
        required_acks,
        deadline,
    )

    first = {p: info.first_offset for p, info in appended.items()}
    if all(info.log_append_time < 0 for info in infos):
        # CreateTime (the usual): each record's own timestamp, no lookup per record.
        if offsets_json is not None:  # the same bytes, rendered in C (no dict per record)
            return orjson.Fragment(offsets_json(placed, first))
        return [{"partition": p, "offset": first[p] + j, "timestamp": ts} for p, j, ts in placed]
    append_time = {p: info.log_append_time for p, info in appended.items()}
    return [
        {
            "partition": p,
            "offset": first[p] + j,
            "timestamp": ts if append_time[p] < 0 else append_time[p],
        }
        for p, j, ts in placed
    ]


@dataclass(slots=True)  # not frozen: built per request, and a frozen __init__ costs 2x
class ProduceCall:
    """What every produce route takes beside its topic (and partition), declared once as
    a dependency: the request, the broker's state and log manager, ``acks`` and
    ``timeout_ms``. Its fields are plain parameters, so LeanRoute still reads them itself."""

    request: Request
    state: StateDep
    manager: ManagerDep
    acks: AcksQuery = "1"
    timeout_ms: TimeoutQuery = 30_000


ProduceCallDep = Annotated[ProduceCall, Depends()]


async def _produce(call: ProduceCall, topic: str, fixed_partition: int | None) -> Response:
    required_acks = parse_acks(call.acks)
    body = await read_body(call.request, call.state.settings.max_request_bytes)
    req = parse_produce_body(body)
    if req.typed:  # avro, jsonschema, protobuf (app/api/typed.py): framed, all or none
        req = typed.encode_request(typed.schema_cache(call.request), req)
    offsets = await append_json_records(
        call.state,
        call.manager,
        topic,
        req,
        call.timeout_ms,
        fixed_partition,
        required_acks=required_acks,
    )
    if required_acks == 0:
        return Response(status_code=204)
    return JSONBytes({"offsets": offsets})


_PRODUCE_ERRORS = error_responses(307, 400, 404, 413, 421, 503, 504)
# 422: a typed record (avro, jsonschema, protobuf) that does not match its schema.
_JSON_PRODUCE_ERRORS = {**_PRODUCE_ERRORS, **error_responses(422)}
_ACKS_0: dict[int | str, dict[str, Any]] = {204: {"description": "Appended (acks=0): no body."}}
_Endpoint = TypeVar("_Endpoint", bound=Callable[..., Any])


def _json_produce(
    path: str, summary: str, description: str, examples: Any
) -> Callable[[_Endpoint], _Endpoint]:
    """The route decorator of a JSON produce operation (one contract, two paths)."""
    return router.post(
        path,
        summary=summary,
        description=description,
        response_model=ProduceResponse,
        responses={**_JSON_PRODUCE_ERRORS, **_ACKS_0},
        openapi_extra=docs.json_request_body("ProduceRequest", examples),
    )


@_json_produce(
    "/topics/{topic}/records",
    "Produce records (the partitioner picks partitions)",
    docs.PRODUCE,
    docs.PRODUCE_EXAMPLES,
)
async def produce(topic: TopicPath, call: ProduceCallDep) -> Response:
    return await _produce(call, topic, None)


@_json_produce(
    "/topics/{topic}/partitions/{partition}/records",
    "Produce records to one partition",
    docs.PRODUCE_PARTITION,
    docs.PRODUCE_PARTITION_EXAMPLES,
)
async def produce_to_partition(
    topic: TopicPath, partition: PartitionPath, call: ProduceCallDep
) -> Response:
    return await _produce(call, topic, partition)


@router.post(
    "/topics/{topic}/partitions/{partition}/batches",
    summary="Produce raw RecordBatch v2 bytes",
    description=docs.PRODUCE_BATCHES,
    response_model=BatchProduceResponse,
    responses={
        **_PRODUCE_ERRORS,
        409: producer_conflict_doc(),
        422: schema_validation_doc(),
        **_ACKS_0,
    },
    openapi_extra=docs.BINARY_REQUEST_BODY,
)
async def produce_batches(
    topic: TopicPath, partition: PartitionPath, call: ProduceCallDep
) -> Response:
    required_acks = parse_acks(call.acks)
    body = await read_body_mutable(call.request, call.state.settings.max_request_bytes)
    coordinator = getattr(call.request.app.state, "txn_coordinator", None)
    info = await produce_raw(
        call.state,
        call.manager,
        topic,
        partition,
        body,
        required_acks,
        call.timeout_ms,
        coordinator,
    )
    if required_acks == 0:
        return Response(status_code=204)
    appended: list[dict[str, Any]] = []
    base = info.first_offset
    # Retries of an idempotent producer's batches answer their original offsets;
    # the batches written now hold consecutive offsets from info.first_offset.
    originals = info.duplicates
    for i, (_, header) in enumerate(iter_headers(body)):
        count = header.last_offset_delta + 1
        original = originals[i] if originals else None
        if original is None:
            first, last = base, base + count - 1
            base += count
        else:
            first, last = original
        appended.append(
            {
                "base_offset": first,
                "last_offset": last,
                "record_count": count,
                "duplicate": original is not None,
            }
        )
    return JSONBytes(
        {
            "topic": topic,
            "partition": partition,
            "batches": appended,
            "log_append_time": info.log_append_time,
            "log_start_offset": info.log_start_offset,
        }
    )
