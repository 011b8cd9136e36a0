"""Where the registry's records live: the one-partition compacted topic ``_schemas``,
over the broker's :class:`~app.core.topology.Topology` (:class:`SchemasLog`).

One code path for a lone broker and a cluster, the placement every internal topic
shares (:class:`~app.core.internal_topic.InternalTopicPlacement`, as the group and
transaction coordinators' ``app/groups/placement.py``, ``app/txn/placement.py``):

* **The topic** is created on the first write, with one partition, ``cleanup.policy=
  compact`` and ``schema_registry_topic_replication_factor`` replicas (capped by the
  live brokers). Alone: one replica, led here for good.
* **Writes** go to the partition's leader only: :meth:`SchemasLog.append` appends as
  leader with acks=all and :meth:`SchemasLog.replicated` waits until every in-sync
  replica holds the records (Kafka's acks=-1), so an answered write survives the loss
  of the leader. Anywhere else NotLeaderOrFollower names the leader.
* **Reads** come from this broker's own replica (:meth:`SchemasLog.catch_up`): the
  records from the store's next offset up to a bound (the replica's high watermark for
  reads: only what is committed; the log end for the leader about to write, which owns
  its log). A replica whose log now ends before what the store applied was truncated
  (a leadership change dropped uncommitted records): the store is rebuilt from the
  start, so it never keeps a record its log no longer has.

Concurrency: event loop only; :func:`replay` (the first load) may run in a worker thread
on a store nobody else sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.common.batch import build_batch, decode_records, iter_headers
from app.common.errors import LogbusError, TopicAlreadyExists, UnknownTopicOrPartition
from app.core.internal_topic import InternalTopicPlacement
from app.registry.records import SCHEMAS_TOPIC, SCHEMAS_TOPIC_CONFIGS
from app.registry.store import SchemaStore

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.topology import Topology

PARTITION = 0
_READ_CHUNK = 1 << 20


def replay(part_log: Log, store: SchemaStore, end: int) -> SchemaStore:
    """Apply ``part_log``'s records from ``store.next_offset`` up to ``end`` (exclusive)
    to ``store``; a fresh store when the log no longer holds what ``store`` applied
    (truncated). Blocking reads (positional, small): fine on the loop for a few records,
    a worker thread for the first load."""
    if part_log.log_end_offset < store.next_offset:
        store = SchemaStore()
    offset = max(store.next_offset, part_log.log_start_offset)
    while offset < end:
        buf = part_log.read(offset, _READ_CHUNK, max_offset=end).read_bytes()
        if not buf:
            break
        next_offset = offset
        for _, header in iter_headers(buf):
            next_offset = header.next_offset
        for record in decode_records(buf, min_offset=offset):
            store.apply(record.key, record.value, record.offset)
        if next_offset <= offset:
            break
        # Past control batches and compacted gaps too: the store has read up to here.
        store.next_offset = max(store.next_offset, next_offset)
        offset = next_offset
    return store


class SchemasLog:
    """``_schemas`` as the registry sees it; see the module docstring."""

    def __init__(
        self,
        topology: Topology,
        node_id: int,
        url: str,
        replication_factor: int,
        write_timeout_ms: int,
    ) -> None:
        self.topology = topology
        self.node_id = node_id
        self.placement = InternalTopicPlacement(
            topology, SCHEMAS_TOPIC, SCHEMAS_TOPIC_CONFIGS, node_id, url, replication_factor
        )
        self.write_timeout_ms = write_timeout_ms

    def exists(self) -> bool:
        return self.placement.partitions() is not None

    async def ensure_topic(self) -> None:
        """Create ``_schemas`` unless it exists (another broker may have just made it)."""
        if self.exists():
            return
        try:
            await self.placement.create(1)
        except TopicAlreadyExists:
            await self.topology.wait_for_leaders(SCHEMAS_TOPIC, self.write_timeout_ms / 1000)

    async def wait_leader(self) -> str | None:
        """The leader's URL once this broker knows one (a topic just created, an election
        under way), waiting up to the write timeout; None if still none."""
        try:
            await self.topology.wait_for_leaders(SCHEMAS_TOPIC, self.write_timeout_ms / 1000)
        except LogbusError:
            return None
        return self.leader()[1]

    def leader(self) -> tuple[int | None, str | None]:
        """(leader id, URL) of ``_schemas``; this broker's own URL when it leads;
        ``(None, None)`` while there is no leader or no topic."""
        return self.placement.leader_of(PARTITION)

    def leads(self) -> bool:
        try:
            return self.placement.leads(PARTITION)
        except UnknownTopicOrPartition:
            return False

    def local_log(self) -> Log | None:
        """This broker's replica of ``_schemas`` (None: no topic yet, or none held here)."""
        try:
            return self.topology.replica_log(SCHEMAS_TOPIC, PARTITION)
        except UnknownTopicOrPartition:
            return None

    def catch_up(self, store: SchemaStore, *, to_log_end: bool = False) -> SchemaStore:
        """``store`` with every committed record of the local replica applied (up to its
        log end with ``to_log_end``: the leader before a write); see :func:`replay`."""
        part_log = self.local_log()
        if part_log is None:
            return store
        end = part_log.log_end_offset if to_log_end else part_log.high_watermark
        if store.next_offset >= end and part_log.log_end_offset >= store.next_offset:
            return store
        return replay(part_log, store, end)

    def append(self, records: Sequence[tuple[bytes, bytes | None]]) -> int:
        """Append ``records`` in one batch as the leader; the last offset. Raises
        NotLeaderOrFollower (naming the leader) or NotEnoughReplicas: nothing written."""
        return self.placement.append(PARTITION, build_batch(records))

    async def replicated(self, last_offset: int) -> None:
        """Until every in-sync replica holds ``last_offset`` (at once alone)."""
        await self.placement.replicated(PARTITION, last_offset, self.write_timeout_ms)
