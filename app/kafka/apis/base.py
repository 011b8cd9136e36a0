"""What every Kafka API handler shares: the context, response modules, constants.

Errors are the :mod:`app.common.errors` classes, answered per partition (or per group,
per topic) with their Kafka code by the handler that meets them; an error raised out of a
handler closes the connection (:mod:`app.kafka.connection`).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from app.common.errors import LogbusError, UnknownTopicId, UnknownTopicOrPartition
from app.common.group_errors import CoordinatorNotAvailable
from app.groups.offsets import OffsetCommit
from app.kafka.encode import build, error_code, per_partition

if TYPE_CHECKING:
    from app.api.state import AppState
    from app.core.security.quotas import Quotas
    from app.core.security.scram_store import ScramStore
    from app.core.topology import Topology
    from app.kafka.fetch_sessions import FetchSessionCache
    from app.kafka.security import KafkaSecurity

# Kafka's principal of a client that did not authenticate (PLAINTEXT, SSL without a
# client certificate): app.core.security.acl.ANONYMOUS.
ANONYMOUS = "User:ANONYMOUS"


@dataclass(slots=True)
class Session:
    """Who is on one connection, and where its SASL exchange stands (event loop only).

    ``authenticated`` is False on a SASL listener until SaslAuthenticate succeeds (then
    only ApiVersions, SaslHandshake and SaslAuthenticate are served); ``principal`` is
    ``User:ANONYMOUS`` until then, ``User:<name>`` after, or the TLS client certificate's
    ``User:<subject DN>`` on an SSL listener. ``mechanism`` is what SaslHandshake chose;
    ``exchange`` a SCRAM exchange under way; ``raw_tokens`` is set by a v0 handshake
    (the next frames are bare SASL tokens, not requests); ``close_after`` makes the
    connection close once the current answer is written (a failed authentication).
    ``expires_at`` is set when re-authentication is on (KIP-368): past it any request but
    SaslHandshake/SaslAuthenticate closes the connection; a client re-authenticates on the
    same connection with the same mechanism and must prove the same principal."""

    principal: str = ANONYMOUS
    host: str = "*"
    # The client.id of the request being answered (its header's; at most 255 characters):
    # a classic group member's client id, and the prefix of the member id it is given.
    client_id: str = ""
    authenticated: bool = True
    mechanism: str | None = None
    exchange: Any = None
    raw_tokens: bool = False
    close_after: bool = False
    # KIP-368 (``kafka_connections_max_reauth_ms`` > 0): when the authenticated session
    # ends (unix seconds), and whether a re-authentication is under way.
    expires_at: float | None = None
    reauthenticating: bool = False


NO_THROTTLE = datetime.timedelta(0)
# Kafka's "not requested" value of authorized-operations fields.
OPERATIONS_OMITTED = -(2**31)
ZERO_UUID = uuid.UUID(int=0)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
# A request's isolation_level: 0 read_uncommitted, 1 read_committed.
READ_COMMITTED_LEVEL = 1
# Kafka caps a fetch's wait the same way the HTTP fetch does (max_wait_ms).
MAX_WAIT_MS = 60_000


@dataclass(frozen=True, slots=True)
class Context:
    """What the handlers share: the broker's state and where clients reach this broker.
    ``txn`` and ``groups`` give the transaction and group coordinators (None while they
    do not serve: before the lifespan started them, once it stops them).
    ``fetch_sessions`` is shared by every connection of the listener (KIP-227 sessions
    outlive connections); ``session`` is this connection's own."""

    state: AppState
    advertised: tuple[str, int]
    txn: Callable[[], Any]
    groups: Callable[[], Any]
    # The door's security (None: PLAINTEXT, no authorizer) and this connection's session.
    security: KafkaSecurity | None = None
    session: Session = field(default_factory=Session)
    # The broker's client quotas (their manager and store), shared with HTTP (None: a
    # broker without them).
    quotas: Quotas | None = None
    # The listener's fetch sessions (KIP-227); None: every fetch is answered sessionless.
    fetch_sessions: FetchSessionCache | None = None
    # The broker's SCRAM credentials (app/core/security/scram_store.py), which
    # Describe/AlterUserScramCredentials read and change; None: a broker without them.
    scram: ScramStore | None = None


@cache
def response_module(api_key: int, version: int) -> Any:
    """The kio module of this API version's response (its nested message classes)."""
    return import_module(load_response_schema(api_key, version).__module__)


def ok_answer(cls: Any, **fields: Any) -> Any:
    """The answer of an API whose error is the whole answer's (FindCoordinator, JoinGroup,
    SyncGroup, ConsumerGroupHeartbeat) when it succeeds: no throttle, no error, the API's
    ``fields``."""
    return build(
        cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, **fields
    )


def error_answer(cls: Any, exc: LogbusError, **fields: Any) -> Any:
    """:func:`ok_answer`'s counterpart for an error of the tree: its Kafka code and message
    (where the message has a field for it), no throttle, and ``fields``, the API's Kafka
    "nothing" values (-1, "", null)."""
    return build(
        cls,
        throttle_time=NO_THROTTLE,
        error_code=error_code(exc),
        error_message=exc.message,
        **fields,
    )


def per_partition_answer(
    m: Any, api: str, topics: Iterable[Any], code_of: Callable[[str, int], ErrorCode], **fields: Any
) -> Any:
    """The answer of an API shaped as OffsetCommit (OffsetCommit, OffsetDelete,
    TxnOffsetCommit): no throttle, ``fields``, and every partition of the request's
    ``topics`` with its code (``code_of(topic, partition)``), in the request's order.
    ``api`` names the messages of ``m``: ``<api>Response``, ``<api>ResponseTopic``,
    ``<api>ResponsePartition``."""
    return build(
        getattr(m, api + "Response"),
        throttle_time=NO_THROTTLE,
        topics=per_partition(
            topics,
            getattr(m, api + "ResponseTopic"),
            getattr(m, api + "ResponsePartition"),
            code_of,
        ),
        **fields,
    )


def timestamp(ms: int) -> datetime.datetime | None:
    return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def group_coordinator(ctx: Context) -> Any:
    coordinator = ctx.groups()
    if coordinator is None or not ctx.state.ready:
        raise CoordinatorNotAvailable(
            "the group coordinator is not serving yet (starting) or stopping"
        )
    return coordinator


def kafka_brokers(ctx: Context) -> dict[int, tuple[str, int]]:
    """The live brokers' advertised Kafka listeners by broker id, sorted: this broker's own
    (``ctx.advertised``, the port actually bound) and the others' from their registrations
    (``/brokers/ids/<id>``'s ``kafka_listener``, through ``Topology.brokers``). A live
    broker without a Kafka listener is left out: a Kafka client could not reach it."""
    topology = ctx.state.topology
    found = {
        broker_id: info.kafka_listener
        for broker_id, info in topology.brokers.items()
        if info.kafka_listener is not None
    }
    found[topology.broker_id] = ctx.advertised
    return dict(sorted(found.items()))


def offset_commits(topics: Iterable[Any], skip: Collection[str] = ()) -> list[OffsetCommit]:
    """The offsets a request commits, topics named in ``skip`` left out: OffsetCommit's and
    TxnOffsetCommit's topics share this shape (``partition_index``, ``committed_offset``,
    ``committed_leader_epoch`` from v6/v2, ``committed_metadata`` maybe null)."""
    return [
        OffsetCommit(
            t.name,
            int(p.partition_index),
            int(p.committed_offset),
            int(getattr(p, "committed_leader_epoch", -1)),
            p.committed_metadata or "",
        )
        for t in topics
        if t.name not in skip
        for p in t.partitions
    ]


@dataclass(frozen=True, slots=True)
class NamedTopic:
    """A request's topic as a handler reads it whichever way the version names topics:
    ``name`` (None where an id names no topic), ``topic_id`` (None where the version
    names topics by name) and the entry's ``partitions`` (its ``partitions`` or
    ``partition_indexes``, as the message calls them)."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: Any


def named_topics(ctx: Context, topics: Iterable[Any]) -> list[NamedTopic]:
    """The request's ``topics`` by name: those naming a topic by id (OffsetCommit v10,
    OffsetFetch v10) resolved through one :class:`TopicIdNames` (so within this step of
    the event loop), the others as named."""
    ids = TopicIdNames(ctx.state.topology)
    out = []
    for t in topics:
        parts = t.partitions if hasattr(t, "partitions") else t.partition_indexes
        if hasattr(t, "name"):
            out.append(NamedTopic(t.name, None, parts))
        else:
            out.append(NamedTopic(ids.name_of(t.topic_id), t.topic_id, parts))
    return out


async def partition_answers(
    topics: Iterable[Any],
    topic_cls: Any,
    partition_cls: Any,
    answer: Callable[[str, int, Any], Awaitable[Mapping[str, Any]]],
    failed: Mapping[str, Any],
    *,
    name_field: str = "name",
    index_field: str = "partition_index",
) -> tuple[Any, ...]:
    """The answer's topics of an API asked partition by partition (ListOffsets,
    OffsetForLeaderEpoch, DeleteRecords), in the request's order: each partition's fields
    are ``answer(topic, partition, entry)``'s (``entry`` the request's partition), or,
    where that raises an error of the tree, the error's code with ``failed``'s fields
    (Kafka's -1s), so one partition's error never fails the others. ``name_field`` and
    ``index_field`` name the topic's name and the partition's index, the same in the
    request and the answer, where a message names them otherwise."""
    out = []
    for t in topics:
        name = getattr(t, name_field)
        partitions = []
        for entry in t.partitions:
            index = int(getattr(entry, index_field))
            try:
                fields, code = await answer(name, index, entry), ErrorCode.none
            except LogbusError as exc:
                fields, code = failed, error_code(exc)
            partitions.append(
                build(partition_cls, **{index_field: index}, error_code=code, **fields)
            )
        out.append(build(topic_cls, **{name_field: name}, partitions=tuple(partitions)))
    return tuple(out)


class TopicIdNames:
    """Topic ids to names for one request (Fetch v13+, ConsumerGroupHeartbeat's owned
    partitions): :meth:`Topology.topic_named_by` until it meets an id that names no
    topic, then one map of every topic's id made for the rest of the request. The
    topology's lookup passes over every topic for each id it does not know, so a request
    naming thousands of unknown ids cost thousands of passes; here it costs at most the
    topology's own passes for the first miss and one more.
    Made and used within one step of the event loop (no await between lookups), so the
    map is the topics as they are."""

    __slots__ = ("_known", "_topology")

    def __init__(self, topology: Topology) -> None:
        self._topology = topology
        self._known: dict[uuid.UUID, str] | None = None

    def name_of(self, topic_id: uuid.UUID | None) -> str | None:
        """The topic ``topic_id`` names, or None (the zero UUID and None name none)."""
        if topic_id is None or topic_id == ZERO_UUID:
            return None
        if self._known is None:
            try:
                return self._topology.topic_named_by(topic_id)
            except UnknownTopicId:
                self._known = self._every_id()
        return self._known.get(topic_id)

    def _every_id(self) -> dict[uuid.UUID, str]:
        known: dict[uuid.UUID, str] = {}
        for name in self._topology.topics():
            try:
                found = self._topology.topic_id(name)
            except UnknownTopicOrPartition:
                continue
            if found != ZERO_UUID:
                known[found] = name
        return known
