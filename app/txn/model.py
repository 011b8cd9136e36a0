"""The transaction coordinator's model: states, a transactional id's metadata, settings.

States and transitions are Kafka's (``TransactionState``), with their ids as written in
``__transaction_state``::

    Empty(0) ──AddPartitions/AddOffsets──▶ Ongoing(1) ──EndTxn commit──▶ PrepareCommit(2)
       ▲                                      │  ──EndTxn abort / timeout / fence──▶ PrepareAbort(3)
       │                                      │
    CompleteCommit(4) ◀── markers written ── PrepareCommit
    CompleteAbort(5)  ◀── markers written ── PrepareAbort

    Dead(6): the id expired (a tombstone follows). PrepareEpochFence(7): in memory only,
    while an Ongoing transaction is aborted with a bumped epoch to fence its producer.

:data:`VALID_PREVIOUS` is the one table of allowed transitions (a move outside it is a
bug: the coordinator's ``_save`` raises). Everything here is plain data, used on the
event loop only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

# The internal topic and Kafka's defaults for it.
TXN_TOPIC = "__transaction_state"
TXN_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
# Kafka's transaction.max.timeout.ms default (15 minutes).
DEFAULT_MAX_TIMEOUT_MS = 900_000
# Kafka's client default transaction.timeout.ms, for callers that give none.
DEFAULT_TIMEOUT_MS = 60_000
# Kafka allows 32767 characters (an int16-length string); the id is a URL path segment
# here, and 255 (as group ids) keeps every request line under the listener's header limit.
MAX_TRANSACTIONAL_ID_LENGTH = 255


class TxnState(enum.Enum):
    """A transactional id's state; ``value`` is (id in the log, Kafka's name)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def kafka_name(self) -> str:
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        return cls._find(0, state_id)

    @classmethod
    def from_name(cls, name: str) -> TxnState:
        return cls._find(1, name)

    @classmethod
    def _find(cls, field: int, wanted: int | str) -> TxnState:
        """The state whose value (id, Kafka name) holds ``wanted`` at ``field``."""
        for s in cls:
            if s.value[field] == wanted:
                return s
        raise ValueError(f"no transaction state {wanted!r}")


S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# States whose transaction is decided and whose markers may still be missing.
PREPARED = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
# States a new transaction may start from.
STARTABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The coordinator's settings (``app.config`` names them ``transaction_*``)."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 3  # transaction.state.log.replication.factor
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS  # transaction.max.timeout.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_check_interval_ms: int = 10_000
    # How long a write to __transaction_state waits for its in-sync replicas (cluster).
    write_timeout_ms: int = 5_000
    # transactional.id.expiration.ms: an id idle this long (no transaction open) is forgotten.
    id_expiration_ms: int = 7 * 24 * 3600 * 1000
    node_id: int = 0
    url: str = ""


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """What a COMMIT or ABORT marker says (Kafka's WriteTxnMarkers ``TxnMarkerEntry``):
    the producer whose transaction ends, the outcome, and the coordinator epoch it was
    decided in (a partition refuses a marker from an older coordinator epoch). The same
    value goes to a partition led here (:func:`app.txn.placement.write_marker`) and, as
    :meth:`as_json`, to one led by another broker."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int

    def as_json(self) -> dict[str, int | bool]:
        """The body of ``POST /topics/{t}/partitions/{p}/markers``."""
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "commit": self.commit,
            "coordinator_epoch": self.coordinator_epoch,
        }


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id's state (Kafka's TransactionMetadata).

    ``partitions``: the partitions the current (or last, while it completes) transaction
    wrote to or added, ``__consumer_offsets`` ones included (AddOffsetsToTxn).
    ``pending_markers``: of those, the ones whose marker is not written yet (Prepare*).
    ``coordinator_epoch``: the leader epoch of the ``__transaction_state`` partition when
    this coordinator loaded the id; every marker carries it.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    pending_markers: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    coordinator_epoch: int = 0
    # The epoch before the last bump (Kafka's lastProducerEpoch): a retried InitProducerId
    # of the producer that got the bumped one is recognised by it. -1 after the bump of a
    # new instance (an InitProducerId naming no epoch): no older instance is recognised.
    last_producer_epoch: int = -1
