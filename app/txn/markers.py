"""Writing the COMMIT or ABORT markers of a decided transaction (Kafka's
TransactionMarkerChannelManager and WriteTxnMarkers).

Once PrepareCommit or PrepareAbort is durable in ``__transaction_state`` the outcome is
decided; :meth:`MarkerWriter.write` then appends the marker to every partition of the
transaction still missing one (``TxnMetadata.pending_markers``), as that partition's
leader, and waits for its in-sync replicas. A partition whose marker could not be written
now (leadership moving, too few in-sync replicas, a full disk) stays pending and the
coordinator tries again (its timer, :mod:`app.txn.coordinator`); the transaction moves
to CompleteCommit/CompleteAbort only when none is left.

A marker written to a ``__consumer_offsets`` partition (offsets committed in the
transaction) is reported to the group coordinator (``on_offsets_marker``), which makes
the producer's pending offsets visible (commit) or drops them (abort), as Kafka's
``GroupCoordinator.onTransactionCompleted``.

Markers whose partition was deleted, or that the partition refuses as fenced (a newer
coordinator epoch wrote there), are dropped: nothing this coordinator could write
would change that partition any more.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.common.errors import (
    InvalidProducerEpoch,
    LogbusError,
    TransactionCoordinatorFenced,
    UnknownTopicOrPartition,
)
from app.groups.placement import OFFSETS_TOPIC
from app.txn.faults import crash_point
from app.txn.model import TxnConfig, TxnMarker, TxnMetadata
from app.txn.placement import TxnPlacement

log = logging.getLogger(__name__)

# (partition of __consumer_offsets, producer id, commit)
OffsetsMarkerListener = Callable[[int, int, bool], None]


class MarkerWriter:
    def __init__(self, placement: TxnPlacement, config: TxnConfig) -> None:
        self.placement = placement
        self.config = config
        self.on_offsets_marker: OffsetsMarkerListener = lambda partition, pid, commit: None

    async def write(self, meta: TxnMetadata, commit: bool) -> bool:
        """Write the missing markers of ``meta``'s transaction; True once none is missing.
        Removes each written partition from ``meta.pending_markers``."""
        marker = TxnMarker(meta.producer_id, meta.producer_epoch, commit, meta.coordinator_epoch)
        for topic, partition in sorted(meta.pending_markers):
            try:
                await self.placement.append_marker(
                    topic, partition, marker, self.config.write_timeout_ms
                )
            except UnknownTopicOrPartition:
                log.info(
                    "transaction %r: %s-%d is gone; no marker needed",
                    meta.transactional_id,
                    topic,
                    partition,
                )
            except (InvalidProducerEpoch, TransactionCoordinatorFenced) as exc:
                log.warning(
                    "transaction %r: marker for %s-%d refused, dropped: %s",
                    meta.transactional_id,
                    topic,
                    partition,
                    exc.message,
                )
            except LogbusError as exc:
                log.info(
                    "transaction %r: marker for %s-%d not written yet (%s); will retry",
                    meta.transactional_id,
                    topic,
                    partition,
                    exc.message,
                )
                continue
            else:
                if topic == OFFSETS_TOPIC:
                    self.on_offsets_marker(partition, meta.producer_id, commit)
            meta.pending_markers.discard((topic, partition))
            crash_point("after-first-marker")
        return not meta.pending_markers
