"""Where a broker's partitions live and who leads them: the one seam between the
request layers (``app/api``, ``app/groups``) and "one broker or a cluster".

Kafka always has a ReplicaManager, even for one broker; so does Logbus. Two
classes implement :class:`Topology`:

* :class:`~app.core.local_topology.LocalTopology`: a lone broker (no ZooKeeper).
  Every partition is here and led here for good, an append is durable once
  written (nobody to replicate to), epoch checks always pass.
* :class:`~app.core.replication.manager.ReplicaManager`: a cluster through
  ZooKeeper. Leadership moves, appends of ``acks=all`` wait for the ISR.

Callers take one path through it: route a produce or fetch with
:meth:`Topology.leader_partition` (NotLeaderOrFollower names the leader when it
is elsewhere), check and append through the :class:`LeaderReplica` it returns
and :meth:`Topology.append_to_leaders`, describe partitions with
:meth:`Topology.partition_info`. Rules that differ between the two (how many
replicas a topic may have, who counts as in sync) live in the implementations,
not in their callers.

Offset lookups a client makes (ListOffsets, a group's reset to latest or a time, a
WebSocket subscription starting at the end) all answer through :func:`list_offset`,
with the replica's :meth:`LeaderReplica.offsets_error`: Kafka's rule that a newly
elected leader whose high watermark still lags the start of its epoch answers
OFFSET_NOT_AVAILABLE (retriable) rather than a watermark that would go backwards.

Concurrency: every method is called on the event loop, except
:meth:`Topology.append_to_leaders` (and the replica's ``append_as_leader``),
which may run on a worker thread.
"""

from __future__ import annotations

import binascii
import uuid
from base64 import urlsafe_b64decode, urlsafe_b64encode
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, Protocol

from app.common.errors import UnknownTopicId, UnknownTopicOrPartition

if TYPE_CHECKING:
    from app.common.errors import OffsetNotAvailable
    from app.core.log.config import LogConfig
    from app.core.log.log import AppendInfo, Log
    from app.core.log.producer_state import UnnumberedBatch
    from app.core.log.topic_rules import ConfigChange
    from app.core.replication.state import BrokerInfo

# (topic, partition, leads) on the event loop, when this broker starts or stops leading.
LeadershipListener = Callable[[str, int, bool], None]
# (topic) on the event loop, when a topic is deleted (anywhere in a cluster).
TopicListener = Callable[[str], None]


@dataclass(frozen=True)
class NewTopic:
    """A topic to create (Kafka's ``NewTopic``): its name, partition count, replication
    factor (``None``: the broker's ``default_replication_factor``) and config overrides
    (validated by the log manager, ``app.core.log.config``). ``validate_only`` (Kafka's
    CreateTopics flag): every check a create makes, nothing written."""

    name: str
    partitions: int
    replication_factor: int | None = None
    configs: Mapping[str, object] = field(default_factory=dict)
    validate_only: bool = False


# What one partition's append is: (this broker's leader replica, the leader epoch the
# request was routed in, the RecordBatch v2 bytes, or a batch the log numbers itself).
LeaderAppend = tuple["LeaderReplica", int, "bytes | bytearray | memoryview | UnnumberedBatch"]


class LeaderReplica(Protocol):
    """This broker's replica of a partition it leads, as :meth:`Topology.leader_partition`
    hands it out (a cluster's :class:`~app.core.replication.partition.Partition`)."""

    @property
    def log(self) -> Log: ...

    @property
    def leader_epoch(self) -> int:
        """The epoch this broker leads in now (0 for a lone broker)."""
        ...

    def check_min_isr(self) -> None:
        """Before an acks=all append: NotEnoughReplicas (nothing written) when the ISR is
        below the partition's min.insync.replicas."""
        ...

    def check_epoch(self, epoch: int | None) -> None:
        """A caller's current leader epoch against ours: FencedLeaderEpoch (older) or
        UnknownLeaderEpoch (newer); None or -1 passes."""
        ...

    def on_follower_fetch(
        self, replica_id: int, fetch_offset: int, log_start_offset: int = -1
    ) -> None:
        """A follower fetched from ``fetch_offset``: it holds everything below it, and
        nothing below ``log_start_offset`` (its own start; -1: not said)."""
        ...

    def offsets_error(self) -> OffsetNotAvailable | None:
        """OffsetNotAvailable while this replica cannot say where its log ends to a client
        (a new leader whose high watermark lags the start of its epoch), else None; see
        :func:`list_offset`."""
        ...

    def append_as_leader(
        self, data: bytes | bytearray | memoryview | UnnumberedBatch, *, acks_all: bool
    ) -> AppendInfo:
        """Append in the epoch this broker leads now (the group coordinator's writes; an
        :class:`~app.core.log.producer_state.UnnumberedBatch` is numbered by the log)."""
        ...

    def append_control(
        self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int
    ) -> AppendInfo:
        """Write a transaction marker (COMMIT or ABORT) in the epoch this broker leads now:
        the transaction coordinator's WriteTxnMarkers (:meth:`Log.append_control`)."""
        ...

    async def wait_replicated(
        self, last_offset: int, timeout_ms: int, epoch: int | None = None
    ) -> None:
        """Until every in-sync replica holds ``last_offset`` (appended in ``epoch``).
        Raises NotLeaderOrFollower (leadership moved), RequestTimedOut or
        NotEnoughReplicasAfterAppend."""
        ...


class Topology(Protocol):
    """A broker's view of where partitions live; see the module docstring."""

    @property
    def broker_id(self) -> int: ...

    @property
    def leadership_moves(self) -> bool:
        """Whether leadership of a partition can move between brokers (a cluster's). When
        False every partition is here and led here for the broker's life: a coordinator
        may load its internal topic's partitions at start instead of following
        leadership, and nothing it writes waits for other replicas."""
        ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int | None:
        """The broker acting as controller; None while there is none."""
        ...

    @property
    def brokers(self) -> Mapping[int, BrokerInfo]:
        """Live brokers by id."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    # -- topics and partitions ---------------------------------------------------------

    def topics(self) -> list[str]:
        """Every topic (of the cluster), sorted."""
        ...

    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic`` (cluster-wide); UnknownTopicOrPartition if none."""
        ...

    def partition_info(self, topic: str, partition: int) -> dict[str, Any]:
        """``partition``, ``leader`` (-1: none), ``leader_epoch``, ``replicas``, ``isr``."""
        ...

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id (Kafka's KIP-516 topic id: made once when the topic is created,
        by the controller in a cluster, so every broker answers the same; kept in the
        topic's file and ``partition.metadata``, so it survives restarts; a lone broker's
        topic from before ids were kept gets one at start). The zero UUID only for a
        cluster topic whose assignment has none. UnknownTopicOrPartition if none."""
        ...

    def topic_named_by(self, topic_id: uuid.UUID) -> str:
        """The name of the topic whose id is ``topic_id``; UnknownTopicId if none (the
        zero UUID names no topic)."""
        ...

    def offline_replicas(self, topic: str, partition: int) -> list[int]:
        """Replicas of the partition on brokers that are not live, or that their broker
        could not make (reported offline), whichever broker they are on: in a cluster
        every broker answers every broker's (from a watch-fed cache, no ZooKeeper read);
        a lone broker has none (a log it cannot make fails the request instead)."""
        ...

    def topic_configs(self, topic: str) -> tuple[LogConfig, dict[str, object]]:
        """The topic's config and its overrides, as this broker answers them (``GET
        /topics/{t}``, DescribeConfigs): a lone broker's logs', a cluster's ZooKeeper
        assignment's. UnknownTopicOrPartition if none."""
        ...

    def replica_log(self, topic: str, partition: int) -> Log | None:
        """This broker's replica of a partition (leader or follower); None when only
        other brokers hold it."""
        ...

    def offsets_error(self, topic: str, partition: int) -> OffsetNotAvailable | None:
        """:meth:`LeaderReplica.offsets_error` of this broker's replica of the partition,
        leader or not (None for a follower, a lone broker, a partition held elsewhere):
        for callers that read a local replica's end without routing to its leader (the
        group coordinator)."""
        ...

    def leader_of(self, topic: str, partition: int) -> tuple[int | None, str | None]:
        """(leader id, its URL); ``(None, None)`` while there is no leader.
        UnknownTopicOrPartition for a partition that does not exist."""
        ...

    def is_leader(self, topic: str, partition: int) -> bool: ...

    def leader_partition(self, topic: str, partition: int) -> LeaderReplica:
        """This broker's replica if it leads ``topic-partition``; else NotLeaderOrFollower
        naming the leader (UnknownTopicOrPartition for a partition that does not exist)."""
        ...

    def append_to_leaders(
        self, work: Sequence[LeaderAppend], *, acks_all: bool
    ) -> list[AppendInfo]:
        """Append each partition's batches as its leader, in the epoch given: all or none
        (a failed leadership or min-ISR check writes nothing anywhere). Runs on the loop
        or on a worker thread."""
        ...

    def authorize_follower(self, replica_id: int, credential: str | None) -> bool:
        """Whether a fetch claiming to come from broker ``replica_id`` is a follower's (it
        then reads up to the log end and reports its progress). Raises
        ClusterAuthorizationFailed when the credential is not that broker's."""
        ...

    # -- changes -----------------------------------------------------------------------

    async def create_topic(self, topic: NewTopic, *, timeout_ms: int = 30_000) -> None:
        """Create a topic and return once every partition has a leader, within
        ``timeout_ms`` (Kafka's CreateTopics timeout: in a cluster, else RequestTimedOut,
        the topic created; 0 or below: at once after the write). Raises InvalidTopic,
        InvalidPartitions, InvalidConfig, InvalidReplicationFactor,
        PartitionLimitExceeded or TopicAlreadyExists."""
        ...

    async def alter_topic_config(
        self,
        name: str,
        overrides: ConfigChange,
        *,
        validate_only: bool = False,
        timeout_ms: int = 30_000,
    ) -> None:
        """Replace the topic's config overrides (configs not named return to the
        default), or, given a function, with what it makes of the current ones, read
        where they are kept (IncrementalAlterConfigs: in a cluster the ZooKeeper
        assignment, inside the compare-and-set, not this broker's view, which may lag a
        change made through another broker); ``validate_only`` checks only. In a cluster
        the overrides are the topic's ZooKeeper assignment's and every broker applies
        them; this returns once this broker has, within ``timeout_ms`` (else
        RequestTimedOut, the change made; 0: at once after the write). Raises
        UnknownTopicOrPartition, InvalidConfig."""
        ...

    async def delete_records(
        self, topic: str, partition: int, offset: int, *, timeout_ms: int = 30_000
    ) -> int:
        """Move a partition's log start offset up to ``offset`` (-1: its high watermark)
        as its leader; the low watermark (a lone broker: the new log start offset; a
        cluster: once every live replica's and ISR member's start reached it, within
        ``timeout_ms``, else RequestTimedOut). Raises NotLeaderOrFollower,
        UnknownTopicOrPartition, PolicyViolation (``cleanup.policy`` without ``delete``,
        nothing changed), OffsetOutOfRange."""
        ...

    async def create_partitions(
        self, name: str, count: int, *, validate_only: bool = False, timeout_ms: int = 30_000
    ) -> None:
        """Grow a topic to ``count`` partitions (``validate_only``: check only); in a
        cluster the new replicas are placed over the live brokers and this returns once
        every partition has a leader, within ``timeout_ms`` (Kafka's CreatePartitions
        timeout: else RequestTimedOut, the partitions made; 0: at once after the write).
        Raises UnknownTopicOrPartition, InvalidPartitions, InvalidReplicationFactor."""
        ...

    async def wait_for_leaders(self, name: str, wait_s: float) -> None:
        """Until every partition of ``name`` has a leader (LeaderNotAvailable after
        ``wait_s``)."""
        ...

    async def delete_topic(self, name: str) -> None:
        """Delete a topic (UnknownTopicOrPartition if none); topic listeners hear of it."""
        ...

    def add_leadership_listener(self, cb: LeadershipListener) -> None:
        """``cb(topic, partition, leads)`` on the loop whenever this broker starts or stops
        leading a partition (a lone broker's leadership never changes)."""
        ...

    def add_topic_listener(self, cb: TopicListener) -> None:
        """``cb(topic)`` on the loop when a topic is deleted. A listener added twice is
        called once."""
        ...


ZERO_TOPIC_ID = uuid.UUID(int=0)


@lru_cache(maxsize=65_536)
def parse_topic_id(text: str) -> uuid.UUID:
    """A topic id as kept on disk and in ZooKeeper (Kafka's ``Uuid.toString``: URL-safe
    base64 of the 16 bytes, unpadded) as a UUID; "" (a topic older than ids) is the zero
    UUID. Cached: the fetch path asks for the same few ids over and over, and a new
    topic has a new text."""
    if not text:
        return ZERO_TOPIC_ID
    try:
        raw = urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return ZERO_TOPIC_ID
    return uuid.UUID(bytes=raw) if len(raw) == 16 else ZERO_TOPIC_ID


def topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's text form of a topic id (the inverse of :func:`parse_topic_id`)."""
    return urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


class TopicIdIndex:
    """Topic ids to names for :meth:`Topology.topic_named_by`: a map rebuilt from the
    topics when an id is not in it (a new topic), and checked against the topic's id on
    every hit (a topic deleted and created again keeps its name, not its id). An unknown
    id costs one pass over the topics, a known one two dict lookups.

    Concurrency: event loop only (the map is replaced whole, never changed in place)."""

    __slots__ = ("_id_of", "_names", "_topics")

    def __init__(
        self, topics: Callable[[], Iterable[str]], id_of: Callable[[str], uuid.UUID]
    ) -> None:
        self._topics = topics
        self._id_of = id_of
        self._names: dict[uuid.UUID, str] = {}

    def _current(self, name: str) -> uuid.UUID | None:
        try:
            return self._id_of(name)
        except UnknownTopicOrPartition:
            return None

    def name_of(self, topic_id: uuid.UUID) -> str:
        if topic_id != ZERO_TOPIC_ID:
            name = self._names.get(topic_id)
            if name is not None and self._current(name) == topic_id:
                return name
            fresh: dict[uuid.UUID, str] = {}
            for name in self._topics():
                found = self._current(name)
                if found is not None and found != ZERO_TOPIC_ID:
                    fresh[found] = name
            self._names = fresh
            name = fresh.get(topic_id)
            if name is not None:
                return name
        raise UnknownTopicId(topic_id_text(topic_id))


# ListOffsets' special specs; anything else is a timestamp in ms.
OffsetSpec = Literal["earliest", "latest"] | int


def list_offset(
    log: Log,
    at: OffsetSpec,
    *,
    read_committed: bool,
    unavailable: OffsetNotAvailable | None,
) -> tuple[int, int]:
    """``(offset, timestamp)`` a client is answered for ``at`` (Kafka's ListOffsets, as
    ``Partition.fetchOffsetForTimestamp`` and ``ReplicaManager`` decide it):

    - ``earliest``: ``(log start offset, -1)``, always;
    - ``latest``: ``(end, -1)``, the end being the high watermark or with
      ``read_committed`` the last stable offset; ``unavailable`` raised if given;
    - a timestamp: the first record at or after it below the end; where none is,
      ``unavailable`` is raised if given (the record may sit above a lagging high
      watermark), else ``(-1, -1)``.

    ``unavailable`` is the replica's :meth:`LeaderReplica.offsets_error` (or the
    topology's, for a local replica), read by the caller at the same moment."""
    if at == "earliest":
        return log.log_start_offset, -1
    if at == "latest":
        if unavailable is not None:
            raise unavailable
        return (log.last_stable_offset if read_committed else log.high_watermark), -1
    assert isinstance(at, int)
    # Searched below the high watermark (Log.offset_for_timestamp).
    found = log.offset_for_timestamp(at)
    if found is None or (read_committed and found[0] >= log.last_stable_offset):
        if unavailable is not None:
            raise unavailable
        return -1, -1
    return found
