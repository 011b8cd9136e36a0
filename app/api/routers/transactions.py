"""Transactions over HTTP (Kafka's KIP-98 APIs), stateless as the rest of the API.

Every request names the transactional id in its path and carries the producer id and
epoch that ``POST /producers`` with a ``transactional_id`` handed out (InitProducerId);
nothing is kept per connection. The coordinator (:mod:`app.txn`) does the work; this
module translates:

* ``POST /transactions/{id}/partitions``: AddPartitionsToTxn;
* ``POST /transactions/{id}/topics/{topic}/records``: JSON produce inside the
  transaction for callers that keep no producer state: the broker adds the partitions
  the records go to, builds one transactional batch per partition with the producer's
  id, epoch and next sequence on that partition, and appends them (all or none);
* ``POST /transactions/{id}/groups``: AddOffsetsToTxn;
* ``POST /transactions/{id}/offsets``: TxnOffsetCommit (adds the group's offsets
  partition first, so a stateless caller needs one request);
* ``POST /transactions/{id}/commit`` and ``/abort``: EndTxn;
* ``GET /transactions/{id}`` and ``GET /transactions``: DescribeTransactions and
  ListTransactions.

Binary produce of transactional batches (``POST .../batches``) is checked by the same
coordinator (``app/api/produce_service.py: check_transactional``). In a cluster the coordinator of an id
is the leader of its ``__transaction_state`` partition; other brokers answer 421
NOT_COORDINATOR naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, FastAPI, Path, Query, Request
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import HTTPConnection
from starlette.responses import Response

from app.api import openapi_docs as docs
from app.api import typed
from app.api.codec import BodyInvalid
from app.api.deps import (
    StateDep,
    read_body,
    serving_coordinator,
    start_into_state,
    stop_from_state,
)
from app.api.errors import error_example, router_error_responses
from app.api.models import ProduceResponse, StrictBody
from app.api.openapi_docs import DocumentedRoute
from app.api.produce_body import ParsedProduce, parse_produce_body
from app.api.produce_service import validation
from app.api.routers.records import build_batches, check_schema_ids, checked_batches
from app.api.security import visible
from app.api.state import AppState
from app.api.txn_markers import RemoteMarkerSender
from app.api.util import INT_MAX, LONG_MAX, JSONBytes
from app.common.errors import (
    ClusterAuthorizationFailed,
    InvalidRequest,
    TxnNotCoordinator,
)
from app.core.log.producer_state import UnnumberedBatch
from app.core.log.topic_rules import MAX_TOPIC_NAME_LENGTH
from app.core.replication.auth import HEADER as AUTH_HEADER
from app.core.replication.auth import ID_HEADER
from app.core.security.acl import ResourceType
from app.core.topology import LeaderAppend
from app.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator, OffsetCommit
from app.txn import TransactionCoordinator, TxnConfig
from app.txn.model import TxnMarker
from app.txn.placement import write_marker

router = APIRouter(tags=["transactions"], route_class=DocumentedRoute)

SHORT_MAX = (1 << 15) - 1
# Transaction requests are small; the records of a JSON produce use max_request_bytes.
BODY_LIMIT = 1024 * 1024

TxnIdPath = Annotated[
    str,
    Path(
        description="The transactional id (Kafka's transactional.id).",
        min_length=1,
        max_length=255,
        examples=["orders-copier-0"],
    ),
]

_DESCRIPTIONS = {
    400: "Bad input: INVALID_REQUEST, INVALID_TXN_STATE (the id's state forbids it, for "
    "instance a commit with no transaction, or a produce to a partition not added), "
    "INVALID_TOPIC_EXCEPTION (an internal topic), INVALID_TRANSACTION_TIMEOUT.",
    404: "TRANSACTIONAL_ID_NOT_FOUND (POST /producers with the id first), "
    "UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_MEMBER_ID.",
    409: "PRODUCER_FENCED (a newer instance initialized the id, or the broker aborted the "
    "transaction at its timeout: stop, and init again), INVALID_PRODUCER_EPOCH (an epoch "
    "never handed out), INVALID_PRODUCER_ID_MAPPING (not the id's producer), "
    "CONCURRENT_TRANSACTIONS (retriable: the previous transaction is still being "
    "completed, or another request on the id is being written), OUT_OF_ORDER_SEQUENCE_NUMBER.",
    421: "NOT_COORDINATOR (cluster mode, retriable): another broker coordinates the id; "
    "`coordinator` and `coordinator_url` name it.",
    503: "BROKER_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE; "
    "all retriable.",
}


# Named examples of each status's answers (in the OpenAPI document).
_EXAMPLES: dict[int, list[dict[str, Any]]] = {
    400: [
        error_example(
            "INVALID_TXN_STATE",
            "orders-0 is not in an ongoing transaction of 'orders-copier' (Empty): add it "
            "first (AddPartitionsToTxn)",
            transactional_id="orders-copier",
            topic="orders",
            partition=0,
        ),
    ],
    404: [
        error_example(
            "TRANSACTIONAL_ID_NOT_FOUND",
            "transactional id 'orders-copier' is not known to its coordinator "
            "(InitProducerId with it first)",
            transactional_id="orders-copier",
        ),
    ],
    409: [
        error_example(
            "PRODUCER_FENCED",
            "transactional id 'orders-copier': producer 1000 has epoch 2; epoch 0 is fenced "
            "(a newer instance initialized the id, or the broker aborted its timed-out "
            "transaction)",
            transactional_id="orders-copier",
            producer_id=1000,
            producer_epoch=0,
            current_epoch=2,
        ),
        error_example(
            "INVALID_PRODUCER_EPOCH",
            "transactional id 'orders-copier': producer 1000 has epoch 2; epoch 7 is newer "
            "than any the coordinator handed out",
            transactional_id="orders-copier",
            producer_id=1000,
            producer_epoch=7,
            current_epoch=2,
        ),
        error_example(
            "CONCURRENT_TRANSACTIONS",
            "transactional id 'orders-copier': the previous transaction is being completed; retry",
            True,
            transactional_id="orders-copier",
        ),
        error_example(
            "INVALID_PRODUCER_ID_MAPPING",
            "transactional id 'orders-copier' holds producer id 1000, not 1001",
            transactional_id="orders-copier",
            producer_id=1001,
            current_producer_id=1000,
        ),
    ],
    421: [
        error_example(
            "NOT_COORDINATOR",
            "this broker does not coordinate transactional id 'orders-copier'; its "
            "coordinator is broker 2 (http://broker-2:8080)",
            True,
            transactional_id="orders-copier",
            coordinator=2,
            coordinator_url="http://broker-2:8080",
        ),
    ],
}


_errors = router_error_responses(_DESCRIPTIONS, _EXAMPLES)


def _examples(*pairs: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """An ``openapi_extra`` JSON request body with named examples."""
    return {name: {"summary": summary, "value": value} for name, summary, value in pairs}


def _body(schema: str, *pairs: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    return docs.json_request_body(schema, _examples(*pairs))


# -- lifecycle (called from the app's lifespan) ---------------------------------------------


def txn_config(state: AppState) -> TxnConfig:
    settings = state.settings
    return TxnConfig(
        num_partitions=settings.transaction_state_log_num_partitions,
        replication_factor=settings.transaction_state_log_replication_factor,
        max_timeout_ms=settings.transaction_max_timeout_ms,
        abort_check_interval_ms=settings.transaction_abort_timed_out_transaction_cleanup_interval_ms,
        write_timeout_ms=settings.offsets_commit_timeout_ms,
        id_expiration_ms=settings.transactional_id_expiration_ms,
        node_id=settings.broker_id,
        url=settings.url,
    )


async def start_coordinator(app: FastAPI, state: AppState) -> None:
    """Start the transaction coordinator (after the group coordinator, whose offsets it
    commits in transactions)."""
    assert state.manager is not None
    groups: GroupCoordinator | None = getattr(app.state, "coordinator", None)
    coordinator = TransactionCoordinator(
        state.topology, state.manager.producer_ids, txn_config(state), groups=groups
    )
    # How a marker reaches a partition the topology says another broker leads (never
    # the case on a lone broker; the sender opens no connection until it sends).
    sender = RemoteMarkerSender(state)
    coordinator.placement.remote = sender.send
    app.state.txn_marker_sender = sender
    await start_into_state(
        app, "txn_coordinator", coordinator, "the transaction coordinator could not start"
    )


async def stop_coordinator(app: FastAPI) -> None:
    await stop_from_state(app, "txn_coordinator")
    await stop_from_state(app, "txn_marker_sender", "close")


def get_txn_coordinator(request: HTTPConnection) -> TransactionCoordinator:
    coordinator: TransactionCoordinator = serving_coordinator(
        request, "txn_coordinator", "transaction"
    )
    return coordinator


# -- models ---------------------------------------------------------------------------------


class TxnProducer(StrictBody):
    producer_id: int = Field(ge=0, le=LONG_MAX, description="From POST /producers.")
    producer_epoch: int = Field(ge=0, le=SHORT_MAX, description="From POST /producers.")


class TxnTopicPartitions(StrictBody):
    topic: str = Field(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)
    partitions: list[Annotated[int, Field(ge=0, le=INT_MAX)]] = Field(min_length=1)


class AddPartitionsRequest(TxnProducer):
    topics: list[TxnTopicPartitions] = Field(min_length=1)


class EndTxnRequest(TxnProducer):
    pass


class AddOffsetsRequest(TxnProducer):
    group_id: str = Field(min_length=1, max_length=255, description="The consumer group.")


class TxnOffset(StrictBody):
    topic: str = Field(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)
    partition: int = Field(ge=0, le=INT_MAX)
    offset: int = Field(ge=0, le=LONG_MAX, description="The next offset to consume.")
    leader_epoch: int = Field(default=-1, ge=-1, le=INT_MAX)
    metadata: str = Field(default="", max_length=4096)


class TxnOffsetCommitRequest(TxnProducer):
    group_id: str = Field(min_length=1, max_length=255)
    member_id: str | None = Field(
        default=None,
        max_length=255,
        description="With `member_epoch` (KIP-447): the group member consuming the input; a "
        "member fenced by a rebalance cannot commit.",
    )
    member_epoch: int = Field(default=-1, ge=-1, le=INT_MAX, description="-1: no member check.")
    offsets: list[TxnOffset] = Field(min_length=1)


class TransactionDescription(BaseModel):
    """Kafka's DescribeTransactions fields."""

    transactional_id: str
    transaction_state: str = Field(
        description="Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, "
        "CompleteAbort, Dead or PrepareEpochFence (Kafka's names).",
        examples=["Ongoing"],
    )
    transaction_timeout_ms: int
    transaction_start_time_ms: int = Field(description="-1 when no transaction has started.")
    producer_id: int
    producer_epoch: int
    topics: list[TxnTopicPartitions] = Field(
        description="The partitions of the transaction (while it completes: those still "
        "missing their marker)."
    )
    coordinator: int = Field(description="The broker coordinating the id.")


class ListedTransaction(BaseModel):
    transactional_id: str
    producer_id: int
    transaction_state: str


class ListTransactionsResponse(BaseModel):
    """Kafka's ListTransactions fields."""

    unknown_state_filters: list[str]
    transaction_states: list[ListedTransaction]


class EndTxnResponse(BaseModel):
    transactional_id: str
    transaction_state: str = Field(
        description="CompleteCommit/CompleteAbort; PrepareCommit/PrepareAbort when some "
        "partition could not take its marker yet (the outcome is decided and durable; the "
        "broker completes it)."
    )


class TxnOffsetCommitResponse(BaseModel):
    group_id: str
    partition: int = Field(description="The group's __consumer_offsets partition.")
    offsets: list[TxnOffset]


_Body = TypeVar("_Body", bound=BaseModel)
_Route = TypeVar("_Route", bound=Callable[..., Any])


async def _read(request: Request, model: type[_Body]) -> _Body:
    """The request's JSON body as ``model`` (an empty body is ``{}``); 400 INVALID_REQUEST
    naming the fields otherwise."""
    try:
        return model.model_validate_json(await read_body(request, BODY_LIMIT) or b"{}")
    except ValidationError as exc:
        raise BodyInvalid.from_validation(exc) from None


async def _txn_request(
    request: Request, model: type[_Body]
) -> tuple[_Body, TransactionCoordinator]:
    """What every request on a transactional id starts with: its body (checked first), then
    the coordinator (421 NOT_COORDINATOR or 503 when this broker cannot serve the id)."""
    return await _read(request, model), get_txn_coordinator(request)


_PRODUCER = {"producer_id": 1000, "producer_epoch": 0}


def _txn_post(
    path: str,
    *,
    response_model: type[BaseModel],
    body: str,
    examples: list[tuple[str, str, dict[str, Any]]],
) -> Callable[[_Route], _Route]:
    """The declaration the requests on a transactional id share: ``POST
    /transactions/{transactional_id}`` + ``path``, the same failures (any of them can meet
    an unknown or fenced id, a coordinator elsewhere or loading), and a JSON body of the
    schema ``body`` with named examples (summary, value). The endpoint's docstring documents
    it (:class:`~app.api.openapi_docs.DocumentedRoute`)."""
    return router.post(
        "/transactions/{transactional_id}" + path,
        response_model=response_model,
        responses=_errors(400, 404, 409, 421, 503),
        openapi_extra=_body(body, *examples),
    )


# -- routes ---------------------------------------------------------------------------------


@_txn_post(
    "/partitions",
    response_model=TransactionDescription,
    body="AddPartitionsRequest",
    examples=[
        (
            "two_partitions",
            "Partitions 0 and 1 of orders",
            {**_PRODUCER, "topics": [{"topic": "orders", "partitions": [0, 1]}]},
        )
    ],
)
async def add_partitions_to_txn(
    transactional_id: TxnIdPath, request: Request, state: StateDep
) -> Response:
    """Add partitions to the transaction (AddPartitionsToTxn)

    Starts the transaction (state Ongoing) or extends it. Transactional batches to a partition
    (binary produce) are accepted only once it is added. Answers the transaction as
    DescribeTransactions does.
    """
    req, tc = await _txn_request(request, AddPartitionsRequest)
    wanted = {(t.topic, p) for t in req.topics for p in t.partitions}
    await tc.add_partitions(transactional_id, req.producer_id, req.producer_epoch, wanted)
    return JSONBytes(tc.describe(transactional_id))


@_txn_post(
    "/topics/{topic}/records",
    response_model=ProduceResponse,
    body="ProduceRequest",
    examples=[
        (
            "two",
            "Two keyed records",
            {"records": [{"key": "a", "value": {"n": 1}}, {"key": "b", "value": {"n": 2}}]},
        )
    ],
)
async def produce_transactional(
    transactional_id: TxnIdPath,
    topic: Annotated[str, Path(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)],
    request: Request,
    state: StateDep,
    producer_id: Annotated[int, Query(ge=0, le=LONG_MAX, description="From POST /producers.")],
    producer_epoch: Annotated[int, Query(ge=0, le=SHORT_MAX, description="From POST /producers.")],
    base_sequence: Annotated[
        int | None,
        Query(
            ge=0,
            le=INT_MAX,
            description="The batch's first sequence number (records of one partition only), "
            "so that a retry is written once; default: the partition's next one.",
        ),
    ] = None,
) -> Response:
    """Produce JSON records inside the transaction

    For callers that keep no producer state: the body is a produce request (as `POST
    /topics/{topic}/records`); the broker adds the partitions the records go to, builds one
    transactional batch per partition with the producer's id, epoch and next sequence there, and
    appends them all or none (acks=all). The records are visible to `read_committed` readers
    once the transaction commits. The topic must exist. In a cluster send it to the partitions'
    leader (others answer 307/421 NOT_LEADER_OR_FOLLOWER naming it); when another broker
    coordinates the id, add the partitions there first (`POST /transactions/{id}/partitions`).

    A retry of a request whose answer was lost (a timeout, a leader that died after its
    followers had the records) is written again unless it names its sequence: with
    `base_sequence` (the producer's sequence in that partition, counted by the caller from 0
    at each epoch, one per record) the records of one partition are one idempotent batch, and
    a retry with the same number is answered with the first write's offsets (Kafka's
    idempotent producer); another number than the partition expects is 409
    OUT_OF_ORDER_SEQUENCE_NUMBER, records of several partitions 400 INVALID_REQUEST.
    """
    body = await read_body(request, state.settings.max_request_bytes)
    req = parse_produce_body(body)
    if req.typed:  # avro, jsonschema, protobuf: framed before anything is built
        req = typed.encode_request(typed.schema_cache(request), req)
    offsets = await produce_in_transaction(
        state,
        get_txn_coordinator(request),
        transactional_id,
        producer_id,
        producer_epoch,
        topic,
        req,
        base_sequence=base_sequence,
    )
    return JSONBytes({"offsets": offsets})


async def produce_in_transaction(
    state: AppState,
    tc: TransactionCoordinator,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topic: str,
    req: ParsedProduce,
    partition: int | None = None,
    *,
    base_sequence: int | None = None,
) -> list[dict[str, int]]:
    """JSON records produced inside the transaction, for a caller that keeps no producer
    state (this route and a WebSocket produce message): the partitions they go to (all
    to ``partition`` if given) are added to the transaction, one transactional batch per
    partition is built with the producer's id, epoch and next sequence there, and all are
    appended or none (acks=all). The records' ``{partition, offset, timestamp}``.

    ``base_sequence``: the caller numbers the batch (records of one partition only), so
    the partition's idempotence check answers a retry with the first write's offsets
    instead of writing it twice."""
    topology = state.topology
    n = topology.partition_count(topic)
    now_ms = int(time.time() * 1000)
    builders, placed = build_batches(
        req, n, partition, lambda: state.sticky.next_partition(topic, n), now_ms
    )
    built = checked_batches(
        topic,
        n,
        builders,
        lambda p: topology.leader_partition(topic, p).log.config.max_message_bytes,
    )
    if base_sequence is not None and len(built) > 1:
        raise InvalidRequest(
            f"base_sequence numbers one batch, but the records go to {len(built)} partitions "
            f"of {topic!r}: send each partition's records in a request of their own"
        )
    if built:  # broker-side schema validation (app/api/schema_validation.py)
        sides = validation(topology.leader_partition(topic, min(built)).log.config)
        if any(sides):
            await check_schema_ids(state, topic, sides, built, placed)
    # TxnNotCoordinator: this broker leads the partitions and another coordinates the id
    # (a cluster; a lone broker coordinates every id). As for a binary produce (and
    # Kafka's producer), the caller added them at the coordinator first (POST
    # /transactions/{id}/partitions there); the batches are appended unverified, as
    # check_produce accepts a producer coordinated elsewhere.
    with contextlib.suppress(TxnNotCoordinator):
        await tc.add_partitions(
            transactional_id, producer_id, producer_epoch, {(topic, p) for p in built}
        )
    # Without base_sequence each partition's log numbers its batch with the producer's
    # next sequence there, under its lock in the same hold as the append (UnnumberedBatch):
    # a sequence read here could be taken by a concurrent append of the producer (a
    # binary produce on a worker thread) and this batch refused or, with the same
    # sequence range, answered as a retry of that one and dropped.
    # Under an append permit from the checks to the append (EndTxn waits for it).
    with tc.append_permit(producer_id):
        work: list[LeaderAppend] = []
        for p in sorted(built):
            tc.check_produce(topic, p, producer_id, producer_epoch)
            replica = topology.leader_partition(topic, p)
            batch = UnnumberedBatch(bytearray(built[p]), producer_id, producer_epoch)
            if base_sequence is None:
                work.append((replica, replica.leader_epoch, batch))
            else:
                work.append((replica, replica.leader_epoch, batch.number(base_sequence)))
        # On a worker thread, as every acks=all produce's append (records.py): a leader
        # or ISR lock held by a leadership change, an fsync (flush.messages) or a slow
        # disk must never hold the event loop. The permit may be let go on any thread.
        infos = await asyncio.to_thread(topology.append_to_leaders, work, acks_all=True)
    await asyncio.gather(
        *(
            replica.wait_replicated(info.last_offset, 30_000, epoch)
            for (replica, epoch, _), info in zip(work, infos, strict=True)
        )
    )
    first = {p: info.first_offset for p, info in zip(sorted(built), infos, strict=True)}
    return [{"partition": p, "offset": first[p] + j, "timestamp": ts} for p, j, ts in placed]


@_txn_post(
    "/groups",
    response_model=TransactionDescription,
    body="AddOffsetsRequest",
    examples=[("group", "The copier's group", {**_PRODUCER, "group_id": "copier"})],
)
async def add_offsets_to_txn(transactional_id: TxnIdPath, request: Request) -> Response:
    """Add a group's offsets to the transaction (AddOffsetsToTxn)

    Adds the group's `__consumer_offsets` partition to the transaction, so offsets committed
    with `POST /transactions/{id}/offsets` are part of it (that call does this itself too).
    """
    req, tc = await _txn_request(request, AddOffsetsRequest)
    await tc.add_offsets(transactional_id, req.producer_id, req.producer_epoch, req.group_id)
    return JSONBytes(tc.describe(transactional_id))


@_txn_post(
    "/offsets",
    response_model=TxnOffsetCommitResponse,
    body="TxnOffsetCommitRequest",
    examples=[
        (
            "copier",
            "The input position after the records copied",
            {
                **_PRODUCER,
                "group_id": "copier",
                "offsets": [{"topic": "input", "partition": 0, "offset": 42}],
            },
        )
    ],
)
async def txn_offset_commit(transactional_id: TxnIdPath, request: Request) -> Response:
    """Commit a group's offsets inside the transaction (TxnOffsetCommit)

    The offsets are written to the group's `__consumer_offsets` partition as part of the
    transaction and count (`GET /groups/{group}/offsets`) only once it commits; an abort drops
    them. Adds the group to the transaction first (AddOffsetsToTxn) when this broker coordinates
    the transactional id; in a cluster where another broker does, call `POST
    /transactions/{id}/groups` there first, then this at the group's coordinator.
    """
    req, tc = await _txn_request(request, TxnOffsetCommitRequest)
    partition = await tc.txn_offset_commit(
        transactional_id,
        req.producer_id,
        req.producer_epoch,
        req.group_id,
        [
            OffsetCommit(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
            for o in req.offsets
        ],
        req.member_id,
        req.member_epoch,
    )
    return JSONBytes(
        {
            "group_id": req.group_id,
            "partition": partition,
            "offsets": [o.model_dump() for o in req.offsets],
        }
    )


def _end_txn(outcome: Literal["commit", "abort"]) -> Callable[[_Route], _Route]:
    """EndTxn is one Kafka API with a commit flag: ``POST .../commit`` and ``.../abort``
    are declared alike, with an example named after the outcome."""
    return _txn_post(
        f"/{outcome}",
        response_model=EndTxnResponse,
        body="EndTxnRequest",
        examples=[(outcome, outcome.title(), _PRODUCER)],
    )


async def _end(request: Request, transactional_id: str, commit: bool) -> Response:
    req, tc = await _txn_request(request, EndTxnRequest)
    outcome = await tc.end_txn(transactional_id, req.producer_id, req.producer_epoch, commit)
    return JSONBytes({"transactional_id": transactional_id, "transaction_state": outcome})


@_end_txn("commit")
async def commit_transaction(transactional_id: TxnIdPath, request: Request) -> Response:
    """Commit the transaction (EndTxn commit)

    Writes PrepareCommit, then a COMMIT marker to every partition of the transaction, then
    CompleteCommit. Once answered, `read_committed` readers see its records and the group
    offsets committed in it count. A retry after a success answers the same.
    """
    return await _end(request, transactional_id, True)


@_end_txn("abort")
async def abort_transaction(transactional_id: TxnIdPath, request: Request) -> Response:
    """Abort the transaction (EndTxn abort)

    Writes PrepareAbort, then an ABORT marker to every partition of the transaction (its records
    are never shown to `read_committed` readers, its offsets dropped), then CompleteAbort.
    """
    return await _end(request, transactional_id, False)


@router.get(
    "/transactions/{transactional_id}",
    response_model=TransactionDescription,
    responses=_errors(404, 421, 503),
)
async def describe_transaction(transactional_id: TxnIdPath, request: Request) -> Response:
    """Describe a transactional id (DescribeTransactions)

    Its state (Kafka's names), producer id and epoch, timeout, when the current transaction
    started, and its partitions. 404 TRANSACTIONAL_ID_NOT_FOUND for an id never initialized.
    """
    return JSONBytes(get_txn_coordinator(request).describe(transactional_id))


@router.get("/transactions", response_model=ListTransactionsResponse, responses=_errors(503))
async def list_transactions(
    request: Request,
    state: Annotated[
        list[str] | None,
        Query(description="Only these states (Kafka's names, e.g. Ongoing)."),
    ] = None,
    producer_id: Annotated[list[int] | None, Query(description="Only these producer ids.")] = None,
    duration_ms: Annotated[
        int | None,
        Query(ge=0, le=LONG_MAX, description="Only transactions running longer (KIP-994)."),
    ] = None,
) -> Response:
    """List transactional ids (ListTransactions)

    The ids this broker coordinates (in a cluster, ask every broker, as Kafka's admin client
    does), those the principal may DESCRIBE.
    """
    listed = get_txn_coordinator(request).list_transactions(
        state or (), producer_id or (), duration_ms
    )
    shown = visible(
        request,
        ResourceType.TRANSACTIONAL_ID,
        (t["transactional_id"] for t in listed["transaction_states"]),
    )
    listed["transaction_states"] = [
        t for t in listed["transaction_states"] if t["transactional_id"] in shown
    ]
    return JSONBytes(listed)


class WriteTxnMarkerRequest(StrictBody):
    producer_id: int = Field(ge=0, le=LONG_MAX)
    producer_epoch: int = Field(ge=0, le=SHORT_MAX)
    commit: bool = Field(description="COMMIT (true) or ABORT (false).")
    coordinator_epoch: int = Field(ge=0, le=INT_MAX)


@router.post(
    "/topics/{topic}/partitions/{partition}/markers",
    responses=_errors(409, 421, 503),
    openapi_extra=_body(
        "WriteTxnMarkerRequest",
        (
            "commit",
            "Commit producer 1000's transaction",
            {"producer_id": 1000, "producer_epoch": 0, "commit": True, "coordinator_epoch": 0},
        ),
    ),
)
async def write_txn_marker(
    topic: Annotated[str, Path(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)],
    partition: Annotated[int, Path(ge=0, le=INT_MAX)],
    request: Request,
    state: StateDep,
) -> Response:
    """Write a transaction marker (WriteTxnMarkers, between brokers)

    A transaction coordinator on another broker of the cluster ends a transaction on a partition
    this broker leads: the COMMIT or ABORT control batch is appended as leader and answered once
    every in-sync replica has it. Only brokers of the cluster, with their inter-broker
    credential (`Logbus-Replica-Id`, `Logbus-Replica-Auth`), or, with an authorizer, a principal
    with CLUSTER_ACTION (Kafka's rule): anyone else is 403 CLUSTER_AUTHORIZATION_FAILED. 409
    PRODUCER_FENCED or TRANSACTION_COORDINATOR_FENCED when the partition has seen a newer
    producer or coordinator epoch.
    """
    if not _door_authorized(request):
        _check_broker(request, state)
    req = await _read(request, WriteTxnMarkerRequest)
    offset = await write_marker(
        state.topology.leader_partition(topic, partition),
        TxnMarker(**req.model_dump()),
        state.settings.offsets_commit_timeout_ms,
    )
    if topic == OFFSETS_TOPIC:
        groups: GroupCoordinator | None = getattr(request.app.state, "coordinator", None)
        if groups is not None:
            groups.txn_completed(partition, req.producer_id, req.commit)
    return JSONBytes({"topic": topic, "partition": partition, "offset": offset})


def _door_authorized(request: Request) -> bool:
    """With an authorizer the security door already required CLUSTER_ACTION on the cluster
    (Kafka's rule for WriteTxnMarkers; brokers pass with their credential)."""
    security = getattr(request.app.state, "logbus_security", None)
    return security is not None and security.authorizer is not None


def _check_broker(request: Request, state: AppState) -> None:
    """Without an authorizer: only a broker of this cluster, by its inter-broker credential
    (as a follower's fetch), may write markers."""
    claimed = request.headers.get(ID_HEADER)
    try:
        broker = int(claimed) if claimed is not None else -1
    except ValueError:
        broker = -1
    if broker < 0 or not state.topology.authorize_follower(
        broker, request.headers.get(AUTH_HEADER)
    ):
        raise ClusterAuthorizationFailed(
            "transaction markers are written by the brokers of this cluster only (with their "
            "inter-broker credential) or by a principal with CLUSTER_ACTION; nothing was "
            "written"
        )


# Request body models referenced by the routes' openapi_extra (app/api/app.py adds them).
BODY_MODELS = (
    AddPartitionsRequest,
    AddOffsetsRequest,
    TxnOffsetCommitRequest,
    EndTxnRequest,
    WriteTxnMarkerRequest,
)
