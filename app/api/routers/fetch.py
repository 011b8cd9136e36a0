"""Fetch: decoded JSON records, or the raw batches straight from the segment files.

A fetch that finds fewer than ``min_bytes`` waits up to ``max_wait_ms`` and is
woken by the append that brings data (:mod:`app.api.longpoll`), never by a
sleep loop. The binary answer is the file bytes themselves, sent with
``os.sendfile`` by :class:`~app.api.zerocopy.ZeroCopyResponse`.

``isolation_level=read_committed`` (:mod:`app.common.isolation`): the read stops at
the last stable offset; a JSON answer drops the records of aborted transactions (and,
as always, control batches), a binary answer carries the aborted transactions in the
``Logbus-Aborted-Transactions`` header for the client to filter with the same rule.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api import typed
from app.api.codec import DECODERS, decode_headers
from app.api.deps import ManagerDep, StateDep
from app.api.errors import NotAcceptable, error_responses
from app.api.fetch_service import aborted_pairs, read_log, wait_for_data
from app.api.lean_route import LeanRoute
from app.api.memory import JSON_RENDER_FACTOR, held_json
from app.api.models import EpochEndOffset, FetchResponse, RecordFormat
from app.api.rendered import RenderedBatches
from app.api.util import (
    INLINE_WORK_BYTES,
    INT_MAX,
    JSON,
    LONG_MAX,
    LONG_MIN,
    OCTET_STREAM,
    JSONBytes,
    PartitionPath,
    TopicPath,
    run_blocking,
)
from app.api.zerocopy import ZeroCopyResponse
from app.common.batch import BatchHeader, RecordBatchReader, compute_crc, iter_headers
from app.common.errors import StoredBatchCorrupt
from app.common.isolation import (
    ABORTED_HEADER,
    LSO_HEADER,
    READ_COMMITTED,
    committed_batches,
    format_aborted,
)
from app.core.replication.auth import HEADER as REPLICA_AUTH_HEADER

# A key and a value decoder for a JSON fetch's walk (None: the format's own, DECODERS).
Decoders = tuple[Callable[[bytes | None], Any] | None, Callable[[bytes | None], Any] | None]

if TYPE_CHECKING:
    from app.core.log.log import FetchInfo

log = logging.getLogger(__name__)
# LeanRoute: plain parameters are read without FastAPI's dependency solver (hot path).
router = APIRouter(tags=["fetch"], route_class=LeanRoute)

MAX_WAIT_MS_LIMIT = 60_000
OFFERED = (JSON, OCTET_STREAM)
IsolationLevel = Literal["read_uncommitted", "read_committed"]
TYPED_FETCH_DOC = (
    " `avro`, `jsonschema`, `protobuf`: records in Confluent's wire format, decoded with the "
    "registered schema whose id each carries; a record that is not gets `null` and a "
    '`key_error` / `value_error` (`{"error_code": "INVALID_RECORD", "message": ...}`).'
)


def negotiate(accept: str | None) -> str:
    """The media type to answer with: the client's most preferred one we offer."""
    if not accept:
        return JSON
    best: tuple[float, int, str] | None = None
    for index, part in enumerate(accept.split(",")):
        fields = part.strip().split(";")
        media = fields[0].strip().lower()
        q = 1.0
        for param in fields[1:]:
            name, _, raw = param.strip().partition("=")
            if name.strip() == "q":
                try:
                    q = float(raw)
                except ValueError:
                    q = 0.0
        if q <= 0:
            continue
        if media in OFFERED:
            chosen = media
        elif media in ("*/*", "application/*"):
            chosen = JSON
        else:
            continue
        # Higher q wins; among equal q, the first listed wins.
        candidate = (q, -index, chosen)
        if best is None or candidate[:2] > best[:2]:
            best = candidate
    if best is None:
        raise NotAcceptable(accept, OFFERED)
    return best[2]


def verified_prefix(data: bytes, offset: int, topic: str, partition: int) -> bytes:
    """``data`` up to its first batch that fails its CRC (whole batches only).

    A decoded answer (JSON fetch, WebSocket JSON frames) is checked before it is rendered:
    the disk can damage a batch after it was written (a clean shutdown skips recovery's
    scan), and rendering damaged bytes would hand out wrong records or fail half-way. The
    good batches before the damage are served; a damaged batch first in line raises
    :class:`StoredBatchCorrupt` naming its offsets, and is logged. CRC-32C runs at
    ~19 GB/s here, a rounding error beside rendering JSON. Binary fetches are not checked
    (they leave by ``sendfile``); consumers check them, as Kafka's do (``check_crcs``).
    """
    return _verified(data, offset, topic, partition)[0]


def _verified(
    data: bytes, offset: int, topic: str, partition: int
) -> tuple[bytes, int, list[tuple[int, BatchHeader]]]:
    """:func:`verified_prefix`, the offset after its last batch (``offset`` if none) and
    the prefix's batch headers with their positions: one pass over the headers serves
    all three (the render walked them a second time)."""
    next_offset = offset
    headers: list[tuple[int, BatchHeader]] = []
    for pos, header in iter_headers(data):
        if compute_crc(data, pos, header.size) == header.crc:
            next_offset = max(next_offset, header.next_offset)
            headers.append((pos, header))
            continue
        log.error(
            "damaged batch in %s-%d at offsets %d-%d (CRC-32C mismatch): not served",
            topic,
            partition,
            header.base_offset,
            header.last_offset,
        )
        if pos > 0:
            return data[:pos], next_offset, headers
        raise StoredBatchCorrupt(topic, partition, header.base_offset, header.last_offset)
    return data, next_offset, headers


def json_records(
    data: bytes,
    offset: int,
    key_format: str,
    value_format: str,
    limit: int | None = None,
    *,
    topic: str = "",
    partition: int = 0,
    aborted: Sequence[tuple[int, int]] | None = None,
    decoders: Decoders = (None, None),
) -> tuple[list[dict[str, Any]], int]:
    """The records of ``data`` from ``offset`` on, rendered as in a JSON fetch, and the
    offset to read next; at most ``limit`` records (the WebSocket record credit). Only
    the batches before the first damaged one are rendered (:func:`verified_prefix`).
    ``aborted`` (a read_committed read's aborted transactions): the records of aborted
    transactions are left out (:func:`app.common.isolation.committed_batches`).
    ``decoders``: a key and a value decoder called per record instead of the formats'
    (typed formats: :meth:`app.api.typed.SchemaCache.walk_decoders`)."""
    data, next_offset, headers = _verified(data, offset, topic, partition)
    records: list[dict[str, Any]] = []
    view = memoryview(data)
    if aborted is not None:
        headers = committed_batches(view, headers, aborted)
    for pos, header in headers:
        if header.last_offset < offset or header.is_control:
            continue
        more = None if limit is None else limit - len(records)
        cut = _render_batch(
            records, view, pos, header, offset, key_format, value_format, more, decoders
        )
        if cut:
            return records, records[-1]["offset"] + 1 if records else offset
    return records, next_offset


def _render_batch(
    records: list[dict[str, Any]],
    view: memoryview,
    pos: int,
    header: BatchHeader,
    offset: int,
    key_format: str,
    value_format: str,
    limit: int | None = None,
    decoders: Decoders = (None, None),
) -> bool:
    """Append to ``records`` the records of the batch at ``pos`` (CRC checked by the
    caller) from ``offset`` on, each as the dict a JSON answer holds, at most ``limit``
    of them: True when a record beyond ``limit`` was left out."""
    decode_key = decoders[0] or DECODERS[key_format]
    decode_value = decoders[1] or DECODERS[value_format]
    # The default format, json, decoded in the loop: a call of the decoder per key and
    # per value was a third of a small fetch's Python work. Same result as DECODERS.
    json_key = key_format == "json" and decoders[0] is None
    json_value = value_format == "json" and decoders[1] is None
    loads, malformed = orjson.loads, orjson.JSONDecodeError
    append = records.append
    taken = 0
    # decode_records' walk, with the codec's records read directly: its Record tuple and
    # generator step per record cost as much as the dict rendered from it.
    for r in RecordBatchReader(view[pos : pos + header.size]):
        if r.offset < offset:
            continue
        if limit is not None and taken >= limit:
            return True
        taken += 1
        raw_key, raw_value = r.key, r.value
        try:
            key = decode_key(raw_key) if not json_key or raw_key is None else loads(raw_key)
            value = (
                decode_value(raw_value) if not json_value or raw_value is None else loads(raw_value)
            )
        except malformed:
            # Bytes that are not JSON (another client's): the codec answers them as text.
            key, value = decode_key(raw_key), decode_value(raw_value)
        append(
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "key": key,
                "value": value,
                "headers": decode_headers(r.headers) if r.headers else [],
            }
        )
    return False


def json_records_fragment(
    data: bytes,
    offset: int,
    key_format: str,
    value_format: str,
    cache: RenderedBatches,
    *,
    topic: str = "",
    partition: int = 0,
    aborted: Sequence[tuple[int, int]] | None = None,
    schemas: typed.SchemaCache | None = None,
) -> tuple[orjson.Fragment, int, int]:
    """:func:`json_records` already rendered: the answer's ``records`` array as an
    ``orjson.Fragment`` (the bytes ``orjson.dumps`` gives for :func:`json_records`'s
    list), the offset to read next and the record count. Each batch's records are
    rendered once and kept in ``cache`` (:mod:`app.api.rendered`): a fetch of batches
    read before joins their bytes instead of decoding and rendering every record.

    Typed formats (``schemas`` given): each record is decoded through the id it carries
    during the walk; a batch is kept only when every record of it decoded, since then its
    rendering depends on the batch's bytes and on schemas by id alone, which never change
    (ids are never reused). A batch with a per-record error (say an id not registered
    yet) is rendered again by the next fetch."""
    data, next_offset, headers = _verified(data, offset, topic, partition)
    view = memoryview(data)
    if aborted is not None:
        headers = committed_batches(view, headers, aborted)
    dumps = orjson.dumps
    parts: list[bytes] = []
    for pos, header in headers:
        if header.last_offset < offset or header.is_control:
            continue
        raw = data[pos : pos + header.size]
        key = (key_format, value_format, header.base_offset, header.crc, header.size)
        entry = cache.get(key, raw)
        if entry is None:
            # The whole batch, whatever the offset asked: the next fetch may start earlier.
            rows: list[dict[str, Any]] = []
            if schemas is None:
                _render_batch(rows, view, pos, header, LONG_MIN, key_format, value_format)
                clean = True
            else:
                _render_batch(
                    rows, view, pos, header, LONG_MIN,
                    typed.walk_format(key_format), typed.walk_format(value_format),
                    None, schemas.walk_decoders(key_format, value_format),
                )  # fmt: skip
                clean = not typed.SchemaCache.finish_failed(rows, key_format, value_format)
            offsets = [row["offset"] for row in rows]
            rendered = list(map(dumps, rows))
            if clean:
                cache.put(key, raw, offsets, rendered)
        else:
            offsets, rendered = entry.offsets, entry.records
        if header.base_offset < offset:
            rendered = rendered[bisect_left(offsets, offset) :]
        parts += rendered
    return orjson.Fragment(b"[" + b",".join(parts) + b"]"), next_offset, len(parts)


def render_json(
    topic: str,
    partition: int,
    offset: int,
    info: FetchInfo,
    key_format: str,
    value_format: str,
    schemas: typed.SchemaCache | None = None,
    cache: RenderedBatches | None = None,
) -> bytes:
    """The JSON fetch answer; with ``cache`` (on the event loop), through the rendered
    batches it keeps (:func:`json_records_fragment`)."""
    data = info.read_bytes() if info.size else b""
    if cache is not None:
        fragment, next_offset, _ = json_records_fragment(
            data,
            offset,
            key_format,
            value_format,
            cache,
            topic=topic,
            partition=partition,
            aborted=aborted_pairs(info),
            schemas=schemas,
        )
        return orjson.dumps(records_answer(topic, partition, info, next_offset, fragment))
    records, next_offset = json_records(
        data,
        offset,
        key_format if schemas is None else typed.walk_format(key_format),
        value_format if schemas is None else typed.walk_format(value_format),
        topic=topic,
        partition=partition,
        aborted=aborted_pairs(info),
        # avro, jsonschema, protobuf: decoded by the id each carries, during the walk
        decoders=(None, None)
        if schemas is None
        else schemas.walk_decoders(key_format, value_format),
    )
    if schemas is not None:
        typed.SchemaCache.finish(records, key_format, value_format)
    return orjson.dumps(records_answer(topic, partition, info, next_offset, records))


def records_answer(
    topic: str,
    partition: int,
    info: FetchInfo,
    next_offset: int,
    records: list[dict[str, Any]] | orjson.Fragment,
) -> dict[str, Any]:
    """The fields of a JSON fetch answer, in their order (also a WebSocket records frame's,
    after its ``type``)."""
    return {
        "topic": topic,
        "partition": partition,
        "high_watermark": info.high_watermark,
        "last_stable_offset": info.last_stable_offset,
        "log_start_offset": info.log_start_offset,
        "next_offset": next_offset,
        "records": records,
    }


@router.get(
    "/topics/{topic}/partitions/{partition}/records",
    summary="Fetch records from an offset",
    description=docs.FETCH,
    response_model=FetchResponse,
    responses={
        **docs.FETCH_RESPONSES,
        **error_responses(307, 400, 403, 404, 406, 409, 416, 421, 503),
    },
)
async def fetch_records(
    topic: TopicPath,
    partition: PartitionPath,
    request: Request,
    state: StateDep,
    manager: ManagerDep,
    offset: Annotated[
        int,
        Query(
            ge=LONG_MIN,
            le=LONG_MAX,
            description="First offset wanted. Out of the log's range: 416 with both bounds.",
        ),
    ],
    max_bytes: Annotated[
        int,
        Query(
            ge=1,
            le=INT_MAX,
            description="Answer size goal in bytes (capped by the broker's fetch_max_bytes). "
            "At least one whole batch is returned even when it is larger.",
        ),
    ] = 1024 * 1024,
    min_bytes: Annotated[
        int,
        Query(
            ge=0,
            le=INT_MAX,
            description="Wait (up to max_wait_ms) until at least this many bytes are available.",
        ),
    ] = 1,
    max_wait_ms: Annotated[
        int,
        Query(
            ge=0,
            le=MAX_WAIT_MS_LIMIT,
            description="Longest wait for min_bytes, in ms; an append ends it early.",
        ),
    ] = 500,
    key_format: Annotated[
        RecordFormat, Query(description="How JSON answers render keys." + TYPED_FETCH_DOC)
    ] = "json",
    value_format: Annotated[
        RecordFormat, Query(description="How JSON answers render values." + TYPED_FETCH_DOC)
    ] = "json",
    replica_id: Annotated[
        int | None,
        Query(
            ge=0,
            le=INT_MAX,
            description="Set by follower brokers only (cluster mode): the fetching replica's "
            "broker id, proven by its inter-broker credential in the `Logbus-Replica-Auth` "
            "header (else 403 CLUSTER_AUTHORIZATION_FAILED, nothing changed). The answer then "
            "runs to the log end offset, not the high watermark, and the offset tells the "
            "leader how far the follower is.",
        ),
    ] = None,
    leader_epoch: Annotated[
        int | None,
        Query(
            ge=-1,
            le=INT_MAX,
            description="The leader epoch the caller believes current (Kafka's "
            "current_leader_epoch): an older one answers 409 FENCED_LEADER_EPOCH, a newer "
            "one 409 UNKNOWN_LEADER_EPOCH.",
        ),
    ] = None,
    log_start_offset: Annotated[
        int,
        Query(
            ge=-1,
            le=LONG_MAX,
            description="Set by follower brokers only, with `replica_id`: the follower's own "
            "log start offset (Kafka's fetch `log_start_offset`), from which the leader's "
            "DeleteRecords learns that the follower dropped the deleted records.",
        ),
    ] = -1,
    isolation_level: Annotated[
        IsolationLevel,
        Query(
            description=docs.ISOLATION_LEVEL,
            examples=["read_uncommitted", "read_committed"],
        ),
    ] = "read_uncommitted",
) -> Response:
    media = negotiate(request.headers.get("accept"))
    max_bytes = min(max_bytes, state.settings.fetch_max_bytes)
    min_bytes = min(min_bytes, max_bytes)
    topology = state.topology
    # Before anything else: a forged claim must not even learn who leads.
    replica = replica_id is not None and topology.authorize_follower(
        replica_id, request.headers.get(REPLICA_AUTH_HEADER)
    )
    part = topology.leader_partition(topic, partition)
    part.check_epoch(leader_epoch)
    log = part.log
    if replica:
        assert replica_id is not None
        part.on_follower_fetch(replica_id, offset, log_start_offset)
    committed = isolation_level == READ_COMMITTED and not replica
    info = read_log(log, offset, max_bytes, replica=replica, committed=committed)
    if info.size < min_bytes and max_wait_ms > 0:
        info = await wait_for_data(
            state.waiters,
            manager,
            log,
            offset,
            max_bytes,
            min_bytes,
            max_wait_ms,
            replica=replica,
            committed=committed,
        )
    headers = {
        "Logbus-High-Watermark": str(info.high_watermark),
        "Logbus-Log-Start-Offset": str(info.log_start_offset),
        "Logbus-Log-End-Offset": str(info.log_end_offset),
        LSO_HEADER: str(info.last_stable_offset),
    }
    if committed:
        headers[ABORTED_HEADER] = format_aborted(aborted_pairs(info) or ())
    if media == OCTET_STREAM:
        return ZeroCopyResponse(info.slices, headers=headers)

    schemas = typed.schema_cache(request) if typed.is_typed(key_format, value_format) else None

    async def render() -> bytes:
        if info.size > INLINE_WORK_BYTES:
            return await run_blocking(
                render_json, topic, partition, offset, info, key_format, value_format, schemas
            )
        rendered = state.rendered if state.rendered.max_bytes else None
        return render_json(
            topic, partition, offset, info, key_format, value_format, schemas, rendered
        )

    # The answer holds broker memory until the client has taken it (app/api/memory.py).
    return await held_json(
        state.memory, info.size * JSON_RENDER_FACTOR, render, headers, request.is_disconnected
    )


@router.get(
    "/topics/{topic}/partitions/{partition}/epochs/{epoch}/end-offset",
    summary="Where a leader epoch ends (OffsetsForLeaderEpoch)",
    description="Kafka's OffsetsForLeaderEpoch, answered by the partition's leader: the "
    "largest leader epoch at or below `epoch` that this log knows, and the offset where it "
    "ends (the next epoch's start, or the log end offset for the current epoch); `-1`, `-1` "
    "when `epoch` is unknown. A follower truncates its log to this offset before fetching "
    "from a new leader, so replicas never diverge (KIP-101).",
    response_model=EpochEndOffset,
    responses=error_responses(307, 400, 404, 409, 421, 503),
)
async def epoch_end_offset(
    topic: TopicPath,
    partition: PartitionPath,
    epoch: Annotated[int, Path(description="A leader epoch.", ge=-1, le=INT_MAX)],
    state: StateDep,
    manager: ManagerDep,
    current_leader_epoch: Annotated[
        int | None,
        Query(
            ge=-1,
            le=INT_MAX,
            description="The leader epoch the caller follows (cluster mode): an answer from "
            "another term of this broker's leadership would cut the caller's log wrongly, so "
            "an older one answers 409 FENCED_LEADER_EPOCH, a newer one 409 "
            "UNKNOWN_LEADER_EPOCH.",
        ),
    ] = None,
) -> Response:
    part = state.topology.leader_partition(topic, partition)
    part.check_epoch(current_leader_epoch)
    found_epoch, end_offset = part.log.leader_epoch_cache.end_offset_for(epoch)
    return JSONBytes({"leader_epoch": found_epoch, "end_offset": end_offset})
