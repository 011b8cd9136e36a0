"""The group coordinator: membership, incremental assignment and committed offsets.

:class:`GroupCoordinator` is the facade ``app.api`` and the tests call; the work is
done by one module per concern, as in Kafka's group coordinator:

* :mod:`app.groups.runtime`: which ``__consumer_offsets`` partitions this broker
  serves, loading and unloading them, routing a group to its coordinator, the
  records written and replayed, waiting for the in-sync replicas.
* :mod:`app.groups.membership`: the KIP-848 state machine (member epochs, target
  assignment, reconciliation) and the members' session and rebalance timers.
* :mod:`app.groups.classic`: Kafka's classic protocol (JoinGroup, SyncGroup, Heartbeat,
  LeaveGroup; client-side assignment by a leader member), for the Kafka door.
* :mod:`app.groups.offsets`: commit, fetch, deletion with a topic, expiration (and
  its periodic timer).
* :mod:`app.groups.admin`: list, describe, delete, reset offsets.
* :mod:`app.groups.model`: the groups and members they share, and the request types.

The model is Kafka's consumer group protocol of KIP-848, over stateless HTTP; in
short (each module's docstring has the details):

* A member heartbeats with its epoch. Joining (epoch 0), leaving (-1), a
  static member's temporary leave (-2), a changed subscription, or a change in
  the subscribed topics' partition counts bumps the *group epoch*; the
  assignor then computes the *target assignment* for that epoch at once.
* Each member walks towards its target on its own heartbeats. Partitions it
  must give up are revoked first (its epoch stays); once a heartbeat shows
  they are gone it moves to the target epoch and receives the partitions
  nobody else still owns. A partition another member has not released yet is
  handed over on a later heartbeat. So two members never own one partition,
  and members not touched by a change keep consuming.
* A member silent for the session timeout, or holding partitions to revoke
  past its rebalance timeout, is removed by a per-member timer (one
  ``call_later`` handle, re-armed lazily, not a task per member).
* A heartbeat's ``owned_partitions`` is what the member holds now; without it
  nothing changed since its last report (Kafka's meaning), so a revocation
  counts as done only once a list leaves the partitions out.
* Deleting a topic deletes its committed offsets (tombstones), in every group
  of every coordinator: :meth:`GroupCoordinator.topic_deleted`.
* A static member's temporary leave and a group's empty-since time are written
  with the member and the group (:mod:`app.groups.records`), so a restart
  keeps both; a classic group's generation and members are its own record, so
  a restart keeps them too (:mod:`app.groups.classic`).

Everything runs on the event loop of the API: each public method reads and
changes the state without awaiting in between, so no lock is needed. Appends
to ``__consumer_offsets`` go through :meth:`Log.append` before a change is
answered; the in-memory cache is rebuilt from that topic on start.

In cluster mode (a :class:`~app.core.replication.manager.ReplicaManager` handed
in) this broker coordinates the groups of the ``__consumer_offsets`` partitions
it leads, as Kafka's coordinator does: it loads a partition (in a worker
thread) when it becomes its leader, answering COORDINATOR_LOAD_IN_PROGRESS for
its groups meanwhile, and forgets the partition's groups when it stops leading
it; other groups answer NOT_COORDINATOR naming their coordinator. A change is
applied in memory and appended on the event loop as before; the answer then
waits until every in-sync replica holds the records (and every earlier record
of the partition), so whatever a client was told survives a failover.
Placement (:mod:`app.groups.placement`) hides the difference: a lone broker
leads every partition and its appends need no replication.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.groups.admin import GroupAdmin, group_by_topic
from app.groups.classic import ClassicGroups
from app.groups.membership import MembershipManager
from app.groups.model import (
    DEFAULT_REBALANCE_TIMEOUT_MS,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    MAX_GROUP_ID_LENGTH,
    STATIC_LEAVE_EPOCH,
    CoordinatorInfo,
    Group,
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    HeartbeatResponse,
    Member,
    MemberState,
    TopicPartition,
    cancel_timers,
    validate_group_id,
    wall_ms,
)
from app.groups.offsets import (
    OFFSET_METADATA_MAX_BYTES,
    CommittedOffset,
    OffsetCommit,
    OffsetStore,
    check_committable,
)
from app.groups.placement import OFFSETS_TOPIC, OffsetsPlacement, TopologyView
from app.groups.runtime import CoordinatorRuntime
from app.groups.txn_offsets import TxnOffsetStore

if TYPE_CHECKING:
    from app.core.log.manager import LogManager

# The names app.api and the tests import from here, wherever they are defined now.
__all__ = [
    "DEFAULT_REBALANCE_TIMEOUT_MS",
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "MAX_GROUP_ID_LENGTH",
    "OFFSETS_TOPIC",
    "OFFSET_METADATA_MAX_BYTES",
    "STATIC_LEAVE_EPOCH",
    "CommittedOffset",
    "CoordinatorInfo",
    "Group",
    "GroupConfig",
    "GroupCoordinator",
    "GroupState",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "Member",
    "MemberState",
    "OffsetCommit",
    "TopicPartition",
    "check_committable",
    "group_by_topic",
    "validate_group_id",
]

_DEFAULT_CONFIG = GroupConfig()


class GroupCoordinator:
    """Coordinates the groups of the ``__consumer_offsets`` partitions this broker leads:
    all of them for a lone broker; in a cluster (``cluster``: the broker's ReplicaManager)
    the ones whose leadership it holds, loaded as it gains them.

    Wires the runtime, the membership state machine, the offset store and the admin
    operations together, runs their lifecycle, and delegates each call to its owner."""

    def __init__(
        self,
        manager: LogManager,
        config: GroupConfig = _DEFAULT_CONFIG,
        *,
        cluster: TopologyView | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.manager = manager
        self.config = config
        self.cluster = cluster
        self.runtime = CoordinatorRuntime(manager, config, cluster, clock_ms, monotonic)
        self.placement: OffsetsPlacement = self.runtime.placement
        self.membership = MembershipManager(self.runtime)
        # Kafka's classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): the
        # Kafka door calls it directly (``coordinator.classic.join`` ...).
        self.classic = ClassicGroups(self.runtime)
        self.offsets = OffsetStore(self.runtime)
        self.admin = GroupAdmin(self.runtime, self.membership, self.offsets)
        self.txn_offsets = TxnOffsetStore(self.runtime, self.offsets)
        # Offsets in transactions (the transaction coordinator calls the store itself;
        # WriteTxnMarkers' router ends them): the store's own methods, documented there.
        self.txn_commit_offsets = self.txn_offsets.commit
        self.txn_completed = self.txn_offsets.completed
        # Committing offsets and resetting them: the stores' own methods, documented there.
        self.commit_offsets = self.offsets.commit_offsets
        self.reset_offsets = self.admin.reset_offsets
        self.runtime.on_loaded = self._on_loaded
        self._expire_task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Rebuild the cache from ``__consumer_offsets`` (if it exists) and arm the timers.

        In cluster mode: listen to leadership changes and load the offsets partitions this
        broker leads already (the rest load as leadership arrives)."""
        rt = self.runtime
        rt.loop = asyncio.get_running_loop()
        rt.running = True
        if self.placement.follow_leadership(rt.on_leadership):
            self.placement.add_topic_listener(self.topic_deleted)
        else:
            if OFFSETS_TOPIC in self.manager.topics():
                await asyncio.to_thread(self.load)
                rt.topic_ready = True
                # Offsets of topics missing now are kept: a topic the log manager could
                # not open at start is missing too, and its offsets must survive that.
            self._restore(rt.groups.values())
        rt.loaded = True
        self._expire_task = asyncio.create_task(
            self.offsets.expire_loop(), name="offsets-expiration"
        )

    async def stop(self) -> None:
        rt = self.runtime
        rt.loaded = False
        expire, self._expire_task = self._expire_task, None
        await rt.stop_loading(expire)
        for group in rt.groups.values():
            cancel_timers(group)

    def load(self) -> None:
        """Replay every ``__consumer_offsets`` partition from its start (blocking); :meth:`start`
        then restores the members' subscriptions and sessions on the loop."""
        self.runtime.load()

    def _on_loaded(self, groups: Iterable[Group]) -> None:
        """Cluster mode: the groups of an offsets partition just loaded here."""
        loaded = list(groups)
        self._restore(loaded)
        self.offsets.forget_deleted(loaded)

    def _restore(self, groups: Iterable[Group]) -> None:
        """Sessions of the members of groups just loaded, of either protocol."""
        loaded = list(groups)
        self.membership.restore(loaded)
        self.classic.restore(loaded)

    # -- FindCoordinator and membership ----------------------------------------------------

    async def find_coordinator(self, key: str, key_type: str = "group") -> CoordinatorInfo:
        return await self.runtime.find_coordinator(key, key_type)

    async def heartbeat(self, group_id: str, req: HeartbeatRequest) -> HeartbeatResponse:
        return await self.membership.heartbeat(group_id, req)

    def watch(self, group_id: str, member_id: str, callback: Callable[[], None] | None) -> None:
        self.membership.watch(group_id, member_id, callback)

    def member_state(self, group: Group, member: Member) -> MemberState:
        return self.membership.member_state(group, member)

    def expire_sessions(self) -> int:
        return self.membership.expire_sessions()

    def _remove(self, group: Group, member: Member, reason: str) -> None:
        self.membership.remove(group, member, reason)

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None:
        return self.runtime.loop

    # -- offsets ---------------------------------------------------------------------------

    async def fetch_committed_offsets(
        self, group_id: str, topics: Sequence[str] | None = None, require_stable: bool = False
    ) -> list[CommittedOffset]:
        return await self.offsets.fetch_committed_offsets(group_id, topics, require_stable)

    def unstable_partitions(self, group_id: str) -> dict[TopicPartition, int]:
        return self.offsets.unstable_partitions(group_id)

    def fetch_offsets(
        self, group_id: str, topics: Sequence[str] | None = None
    ) -> list[CommittedOffset]:
        return self.offsets.fetch_offsets(group_id, topics)

    def topic_deleted(self, topic: str) -> None:
        self.offsets.topic_deleted(topic)

    def expire_offsets(self, now_ms: int | None = None) -> int:
        return self.offsets.expire_offsets(now_ms)

    # -- admin -----------------------------------------------------------------------------

    def state_of(self, group: Group) -> str:
        return self.admin.state_of(group)

    def list_groups(self) -> list[dict[str, Any]]:
        return self.admin.list_groups()

    def describe_group(self, group_id: str, read_committed: bool = False) -> dict[str, Any]:
        return self.admin.describe_group(group_id, read_committed)

    async def delete_group(self, group_id: str) -> None:
        await self.admin.delete_group(group_id)

    # -- introspection for tests and the API ------------------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self.runtime.groups.get(group_id)

    @property
    def loaded(self) -> bool:
        return self.runtime.loaded

    @property
    def loading(self) -> list[int]:
        """Cluster mode: the offsets partitions this broker leads and is still loading."""
        return self.runtime.loading

    @property
    def coordinated_partitions(self) -> list[int]:
        """The offsets partitions whose groups this broker serves (cluster mode)."""
        return self.runtime.coordinated_partitions

    def groups(self) -> Mapping[str, Group]:
        return self.runtime.groups
