"""Produce, transport-neutral: what HTTP, WebSocket and the Kafka door share.

Every door turns its request into RecordBatch v2 bytes per partition, then comes here:
where the partition's leader is (:func:`leader_target`), ``min.insync.replicas``
(:func:`check_replicas`), the transactional check (:func:`check_transactional`), the
append itself (:func:`append_work`: on the event loop when small, else one worker-thread
hop) and the acks=all wait (:func:`await_replicas`). Nothing here knows HTTP: errors are
the :mod:`app.common.errors` classes, which each door renders its own way (a status and
body, a Kafka error code). Runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.api.schema_validation import NO_VALIDATION
from app.api.state import AppState
from app.common.batch import (
    HEADER_SIZE,
    TRANSACTIONAL_MASK,
    BatchHeader,
    read_header,
    validate_batches,
)
from app.common.errors import (
    BrokerNotAvailable,
    InvalidTopic,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from app.core.topology import NewTopic
from app.groups.placement import INTERNAL_TOPICS

if TYPE_CHECKING:
    from app.core.log.config import LogConfig
    from app.core.log.log import AppendInfo, Log
    from app.core.log.manager import LogManager
    from app.core.topology import LeaderReplica, Topology
    from app.txn.coordinator import TransactionCoordinator

LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """A produce target: the topic as it is, or as auto-create will make it."""

    partitions: int
    max_message_bytes: int
    exists: bool
    # (key, value): whether confluent.key/value.schema.validation is on
    # (app/api/schema_validation.py).
    schema_validation: tuple[bool, bool] = NO_VALIDATION


def check_not_internal(topic: str) -> None:
    """Only the broker writes or deletes its internal topics (Kafka refuses clients the same)."""
    if topic in INTERNAL_TOPICS:
        raise InvalidTopic(topic, "it is internal to the broker; clients cannot write or delete it")


def plan_topic(state: AppState, manager: LogManager, topic: str) -> TopicPlan:
    """The topic's shape, or the shape Kafka's auto.create.topics.enable would give it.

    Nothing is created here: a request is checked against the plan first, so a
    bad request to a new topic leaves no topic behind. Internal topics are refused.
    """
    check_not_internal(topic)
    try:
        partitions = partition_count(state, topic)
    except UnknownTopicOrPartition:
        if not state.settings.auto_create_topics_enable:
            raise
        defaults = state.settings.log_config
        return TopicPlan(
            state.settings.num_partitions, defaults.max_message_bytes, False, validation(defaults)
        )
    try:
        config = manager.topic_config(topic)
    except UnknownTopicOrPartition:
        # A cluster topic this broker could not create (reported offline): its leader
        # elsewhere takes the request, routed there with the cluster's view of it.
        config = state.topology.topic_configs(topic)[0]
    return TopicPlan(partitions, config.max_message_bytes, True, validation(config))


def validation(config: LogConfig) -> tuple[bool, bool]:
    """(key, value) broker-side schema validation of a topic with ``config``."""
    return (config.confluent_key_schema_validation, config.confluent_value_schema_validation)


async def create_planned(state: AppState, manager: LogManager, topic: str) -> int:
    """Create an auto-created topic; returns its partition count (another request may have won)."""
    topology = state.topology
    # A concurrent request may have created it first: same outcome, once it has leaders.
    with contextlib.suppress(TopicAlreadyExists):
        # No wait in the create: the one below is the same either way, and answers an
        # auto-create without leaders LEADER_NOT_AVAILABLE, as Kafka's.
        await topology.create_topic(NewTopic(topic, state.settings.num_partitions), timeout_ms=0)
    await topology.wait_for_leaders(topic, 30.0)
    return partition_count(state, topic)


def partition_count(state: AppState, topic: str) -> int:
    """The topic's partitions, cluster-wide (a cluster's broker holds only some)."""
    return state.topology.partition_count(topic)


ACKS_ALL = -1


@dataclass(frozen=True, slots=True)
class Target:
    """Where one partition's batches go: this broker's leader replica, with the leader
    epoch it led in when the request was routed. The append happens only if it still
    leads in that epoch (checked again under its lock, :meth:`Topology.append_to_leaders`)."""

    replica: LeaderReplica
    epoch: int

    @property
    def log(self) -> Log:
        return self.replica.log


def leader_target(state: AppState, topic: str, partition: int) -> Target:
    """The partition's Target; NotLeaderOrFollower (naming the leader) when another
    broker leads it."""
    replica = state.topology.leader_partition(topic, partition)
    return Target(replica, replica.leader_epoch)


def check_replicas(target: Target, required_acks: int) -> None:
    """Before an acks=all append: refuse (nothing written) when the partition's ISR is
    below min.insync.replicas (a cluster checks again under the partition's lock, as it
    appends)."""
    if required_acks == ACKS_ALL:
        target.replica.check_min_isr()


async def await_replicas(
    appended: Sequence[tuple[Target, AppendInfo]], required_acks: int, deadline: float
) -> None:
    """acks=all: until every in-sync replica has each appended batch.

    Waits on the replicas that appended, in the epoch they appended in: if leadership
    moved meanwhile the answer is 421 without a leader to go to, never a redirect
    (the write was made; sending it again to the new leader could write it twice)."""
    if required_acks != ACKS_ALL or not appended:
        return
    remaining_ms = max(1, int((deadline - asyncio.get_running_loop().time()) * 1000))
    if len(appended) == 1:
        target, info = appended[0]
        await target.replica.wait_replicated(info.last_offset, remaining_ms, target.epoch)
        return
    # All at once: a waiter registered only after an earlier partition's wait would miss
    # a leadership change in between.
    results = await asyncio.gather(
        *(
            t.replica.wait_replicated(info.last_offset, remaining_ms, t.epoch)
            for t, info in appended
        ),
        return_exceptions=True,
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


# flush.messages at its default: an append is a page-cache write, never an fsync.
_NO_FSYNC = LONG_MAX


def appends_inline(work: Sequence[tuple[Target, bytes | bytearray]], inline_max_bytes: int) -> bool:
    """Whether ``work`` is appended on the event loop: at most ``inline_max_bytes`` in all,
    and no partition fsyncs per append (flush.messages), which must never block the loop."""
    if inline_max_bytes <= 0:
        return False
    if len(work) == 1:  # the usual request: one partition, no generator frames
        target, data = work[0]
        return len(data) <= inline_max_bytes and target.log.config.flush_messages == _NO_FSYNC
    return sum(len(data) for _, data in work) <= inline_max_bytes and all(
        t.log.config.flush_messages == _NO_FSYNC for t, _ in work
    )


async def append_work(
    topology: Topology,
    work: Sequence[tuple[Target, bytes | bytearray]],
    required_acks: int,
    inline_max_bytes: int = 0,
) -> list[AppendInfo]:
    """Append every partition's batches (all or none, see
    :meth:`Topology.append_to_leaders`), on a worker thread unless small. Not bounded by
    the request's timeout_ms: as in Kafka, that bounds only the wait for in-sync replicas
    (acks=all), so a request never stops waiting for an append that then happens
    behind its back. Bounding the local append made acks=0 (which waits for nothing)
    and acks=1 answer 504 for a client's short timeout_ms while the write went on."""
    acks_all = required_acks == ACKS_ALL
    leaders = [(t.replica, t.epoch, data) for t, data in work]
    if appends_inline(work, inline_max_bytes):
        # A small write to the page cache costs less than the hop to a worker
        # thread, which under load waits for the GIL (up to the 5 ms switch
        # interval) and made a WebSocket producer's requests queue.
        return topology.append_to_leaders(leaders, acks_all=acks_all)
    return await asyncio.to_thread(topology.append_to_leaders, leaders, acks_all=acks_all)


def transactional_headers(body: bytes | bytearray) -> Iterator[BatchHeader]:
    """The headers of ``body``'s transactional batches (attribute bit 4), from a walk over
    its batch headers only (untrusted bytes: a batch claiming less than a header ends the
    walk; a malformed body is left to ``Log.append``'s full validation)."""
    pos, end = 0, len(body)
    while end - pos >= HEADER_SIZE:
        header = read_header(body, pos)
        if header.attributes & TRANSACTIONAL_MASK:
            yield header
        if header.size < HEADER_SIZE:
            break
        pos += header.size


def check_transactional(
    coordinator: TransactionCoordinator | None,
    topic: str,
    partition: int,
    body: bytes | bytearray,
    transactional_id: str | None = None,
) -> contextlib.ExitStack:
    """Every transactional batch (attribute bit 4) of ``body`` must come from the current
    epoch of a producer whose ongoing transaction added ``topic-partition``
    (``app/txn/coordinator.py: check_produce``), and, when the request names a
    ``transactional_id`` (Kafka's Produce), from that id's producer: else
    INVALID_TXN_STATE, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH or
    INVALID_PRODUCER_ID_MAPPING, before anything is written.

    Returns the producers' append permits (``app/txn/permits.py``), to hold until the
    append returned (``with``): EndTxn waits for them before deciding.
    """
    permits = contextlib.ExitStack()
    try:
        for header in transactional_headers(body):
            if coordinator is None:
                raise BrokerNotAvailable("the transaction coordinator is not serving")
            pid, epoch = header.producer_id, header.producer_epoch
            permits.enter_context(coordinator.append_permit(pid))
            coordinator.check_produce(topic, partition, pid, epoch, transactional_id)
    except BaseException:
        permits.close()
        raise
    return permits


async def produce_raw(
    state: AppState,
    manager: LogManager,
    topic: str,
    partition: int,
    body: bytes | bytearray,
    required_acks: int,
    timeout_ms: int,
    coordinator: TransactionCoordinator | None,
    transactional_id: str | None = None,
) -> AppendInfo:
    """Append a partition's RecordBatch v2 bytes as they are: the binary produce of every
    door (HTTP ``POST .../batches``, Kafka's Produce).

    Transactional batches only from a producer whose transaction added the partition
    (and, when the request names ``transactional_id``, that id's producer);
    the topic auto-created when absent and ``auto_create_topics_enable`` (checked first,
    so a bad request leaves no topic behind); ``Log.append`` validates every batch (CRC,
    sizes, magic, the idempotent producer's sequence) before writing any. ``timeout_ms``
    bounds only the acks=all wait, as in Kafka. ``body`` may be stamped in place (base
    offset, leader epoch), so pass a buffer the caller no longer needs unchanged.
    """
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    # Transactional batches: only from a producer whose transaction added the partition,
    # under its append permits until the append returned.
    with check_transactional(coordinator, topic, partition, body, transactional_id):
        plan = plan_topic(state, manager, topic)
        if plan.schema_validation != NO_VALIDATION:
            # Before anything is created or written (app/api/schema_validation.py).
            await state.schema_validation.check(topic, plan.schema_validation, body)
        if not plan.exists:
            if not 0 <= partition < plan.partitions:
                raise UnknownTopicOrPartition(topic, partition)
            validate_batches(body, plan.max_message_bytes)
            await create_planned(state, manager, topic)
        target = leader_target(state, topic, partition)
        check_replicas(target, required_acks)
        # A small body is appended on the event loop: under load the worker-thread hop waits
        # for the GIL behind the loop (up to the 5 ms switch interval).
        (info,) = await append_work(
            state.topology, [(target, body)], required_acks, state.settings.inline_append_max_bytes
        )
    await await_replicas([(target, info)], required_acks, deadline)
    return info
