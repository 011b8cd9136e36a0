"""Where ``__transaction_state`` lives, for the transaction coordinator:
:class:`TxnPlacement`, over the broker's :class:`~app.core.topology.Topology`.

The placement every internal topic shares (:mod:`app.core.internal_topic`), one code
path for a lone broker (every partition here, led here, appends durable once written) and a
cluster (the coordinator of a transactional id is the leader of its
``__transaction_state`` partition; its writes count once every in-sync replica has
them, Kafka's acks=-1 for the transaction log). Transaction markers go to the leader
replica of each data partition through the same topology (:meth:`append_marker`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from app.common.batch import build_batch
from app.common.errors import NotLeaderOrFollower
from app.core.internal_topic import InternalTopicPlacement
from app.txn.model import TXN_TOPIC, TXN_TOPIC_CONFIGS, TxnMarker

if TYPE_CHECKING:
    from app.core.log.log import Log
    from app.core.topology import LeaderReplica, Topology


# Kafka's WriteTxnMarkers to another broker: (leader url, topic, partition, marker,
# timeout ms). Raises the LogbusError the leader answered (NotLeaderOrFollower when it
# does not lead the partition any more).
RemoteMarkers = Callable[[str, str, int, TxnMarker, int], Awaitable[None]]


async def write_marker(replica: LeaderReplica, marker: TxnMarker, timeout_ms: int) -> int:
    """Append ``marker`` to a partition this broker leads and wait (up to ``timeout_ms``)
    until its in-sync replicas hold it; the marker's offset. The one way a marker is
    written, whether this broker's coordinator decided it or another broker's sent it."""
    info = replica.append_control(
        marker.producer_id,
        marker.producer_epoch,
        commit=marker.commit,
        coordinator_epoch=marker.coordinator_epoch,
    )
    if replica.log.high_watermark <= info.last_offset:
        await replica.wait_replicated(info.last_offset, timeout_ms)
    return info.first_offset


class TxnPlacement(InternalTopicPlacement["Topology"]):
    """What the coordinator asks about ``__transaction_state`` and data partitions."""

    # Set by the API layer: how a marker reaches a partition led elsewhere (the topology
    # names its leader; never on a lone broker).
    remote: RemoteMarkers | None = None

    def __init__(self, topology: Topology, node_id: int, url: str, replication_factor: int):
        super().__init__(topology, TXN_TOPIC, TXN_TOPIC_CONFIGS, node_id, url, replication_factor)

    def txn_log(self, partition: int) -> tuple[Log, int]:
        """The local log of a ``__transaction_state`` partition this broker leads, and the
        leader epoch it leads in (the coordinator epoch of the ids loaded from it)."""
        replica = self.topology.leader_partition(TXN_TOPIC, partition)
        return replica.log, replica.leader_epoch

    def append_records(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append records in one batch to a partition this broker leads; the last offset.
        Raises NotLeaderOrFollower or NotEnoughReplicas (nothing written)."""
        return self.append(partition, build_batch(records))

    async def append_marker(
        self, topic: str, partition: int, marker: TxnMarker, timeout_ms: int
    ) -> None:
        """Kafka's WriteTxnMarkers for one partition: the COMMIT or ABORT control batch,
        appended by this broker as the partition's leader and replicated to its ISR, or
        sent to the broker that leads it (:attr:`remote`, the leader's
        ``POST /topics/{t}/partitions/{p}/markers``). Raises NotLeaderOrFollower while
        the partition has no leader that can be reached."""
        try:
            replica = self.topology.leader_partition(topic, partition)
        except NotLeaderOrFollower as exc:
            if self.remote is None or not exc.leader_url:
                raise
            await self.remote(exc.leader_url, topic, partition, marker, timeout_ms)
            return
        await write_marker(replica, marker, timeout_ms)
