"""Admin operations on groups: list, describe, delete, reset offsets.

What Kafka's admin client asks a group coordinator (ListGroups, DescribeGroups,
DeleteGroups, and the offsets reset of ``kafka-consumer-groups.sh``). They read the
runtime's cache and change it only through the offset store, with the same rules
for every caller: a group with members is neither deleted nor reset (NON_EMPTY_GROUP).
The HTTP shapes returned here are what ``app.api.routers.groups`` answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from app.common.errors import InvalidRequest, UnknownTopicOrPartition
from app.common.group_errors import CoordinatorLoadInProgress, GroupIdNotFound, NonEmptyGroup
from app.core.topology import list_offset
from app.groups.classic import ClassicGroup, decode_assignment, decode_subscription
from app.groups.hashing import partition_for
from app.groups.membership import MembershipManager
from app.groups.model import Group, GroupState, MemberState, TopicPartition, validate_group_id
from app.groups.offsets import CommittedOffset, OffsetCommit, OffsetStore, check_committable
from app.groups.placement import OFFSETS_TOPIC
from app.groups.runtime import CoordinatorRuntime


def group_by_topic(tps: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    """``[{"topic", "partitions": [...]}]``, topics and partitions sorted."""
    by_topic: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        by_topic.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


class GroupAdmin:
    """The admin operations, over the runtime's cache, the membership state machine (for
    members' states) and the offset store (for the writes)."""

    def __init__(
        self, runtime: CoordinatorRuntime, membership: MembershipManager, offsets: OffsetStore
    ) -> None:
        self.rt = runtime
        self.membership = membership
        self.offsets = offsets

    def state_of(self, group: Group) -> str:
        """Empty, Assigning (target behind the group epoch), Reconciling, or Stable; a
        classic group's own state (Empty, PreparingRebalance, CompletingRebalance,
        Stable)."""
        if group.classic is not None and not group.members:
            return group.classic.state.value
        if not group.members:
            return GroupState.EMPTY
        if group.assignment_epoch < group.group_epoch:
            return GroupState.ASSIGNING
        for m in group.members.values():
            if (
                m.member_epoch != group.assignment_epoch
                or self.membership.member_state(group, m) != MemberState.STABLE
            ):
                return GroupState.RECONCILING
        return GroupState.STABLE

    def list_groups(self) -> list[dict[str, Any]]:
        """The groups this broker coordinates (in a cluster: of the offsets partitions it
        leads; COORDINATOR_LOAD_IN_PROGRESS while one of them is loading, as Kafka)."""
        self.rt.check_loaded()
        loading = self.rt.loading
        if loading:
            raise CoordinatorLoadInProgress(
                f"loading the groups of {OFFSETS_TOPIC} partitions {loading}; retry shortly"
            )
        return [
            {
                "group": g.group_id,
                "state": self.state_of(g),
                "protocol_type": _protocol_type(g),
                "members": g.member_count(),
                "group_epoch": g.group_epoch if g.classic is None else g.classic.generation,
                "protocol": _protocol(g),
            }
            for g in sorted(self.rt.groups.values(), key=lambda g: g.group_id)
        ]

    def lookup(self, group_id: str) -> Group:
        """The group coordinated here (GROUP_ID_NOT_FOUND, NOT_COORDINATOR, loading)."""
        return self._get(group_id)

    def _get(self, group_id: str) -> Group:
        self.rt.check_loaded()
        validate_group_id(group_id)
        self.rt.route(group_id)
        group = self.rt.groups.get(group_id)
        if group is None:
            raise GroupIdNotFound(group_id)
        return group

    def describe_group(self, group_id: str, read_committed: bool = False) -> dict[str, Any]:
        """The group, its members and committed offsets with their lag: to the high
        watermark, or with ``read_committed`` to the last stable offset (what a
        read_committed consumer can reach: records of open transactions are no lag yet)."""
        group = self._get(group_id)
        offsets = self._lags(group, read_committed)
        if group.classic is not None and not group.members:
            return self._describe_classic(group, group.classic, offsets)
        return {
            "group": group.group_id,
            "state": self.state_of(group),
            "protocol_type": "consumer",
            "protocol": "consumer",
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor": group.assignor,
            "coordinator": self._coordinator(group),
            "members": [
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "member_epoch": m.member_epoch,
                    "state": self.membership.member_state(group, m).value,
                    "subscribed_topics": m.subscribed_topics,
                    "subscribed_topic_regex": m.subscribed_regex,
                    "server_assignor": m.server_assignor,
                    "assignment": group_by_topic(m.assigned),
                    "pending_revocation": group_by_topic(m.revoking),
                    "target_assignment": group_by_topic(group.target.get(m.member_id, ())),
                }
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
            "offsets": offsets,
        }

    def _coordinator(self, group: Group) -> dict[str, Any]:
        return {
            "node_id": self.rt.config.node_id,
            "url": self.rt.config.url,
            "partition": partition_for(group.group_id, self.rt.num_partitions()),
        }

    def _describe_classic(
        self, group: Group, cg: ClassicGroup, offsets: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """A classic group in the same shape: its generation as both epochs, the client
        assignor the generation chose, each member's subscription and assignment read from
        the consumer protocol's bytes (empty where they are not the consumer protocol's)."""
        protocol = cg.protocol_name or ""
        members = []
        for m in sorted(cg.members.values(), key=lambda m: m.member_id):
            topics = decode_subscription(m.metadata(protocol)) if protocol else []
            assigned = decode_assignment(m.assignment)
            members.append(
                {
                    "member_id": m.member_id,
                    "instance_id": m.instance_id,
                    "member_epoch": cg.generation,
                    "state": cg.state.value,
                    "subscribed_topics": topics,
                    "subscribed_topic_regex": None,
                    "server_assignor": None,
                    "assignment": group_by_topic(assigned),
                    "pending_revocation": [],
                    "target_assignment": group_by_topic(assigned),
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                }
            )
        return {
            "group": group.group_id,
            "state": cg.state.value,
            "protocol_type": cg.protocol_type or "consumer",
            "protocol": "classic",
            "group_epoch": cg.generation,
            "assignment_epoch": cg.generation,
            "assignor": protocol,
            "coordinator": self._coordinator(group),
            "leader": cg.leader,
            "members": members,
            "offsets": offsets,
        }

    def _lags(self, group: Group, read_committed: bool) -> list[dict[str, Any]]:
        offsets = []
        for (t, p), v in sorted(group.offsets.items()):
            # As this broker's replica knows it (in a cluster a follower's may trail its
            # leader's by a fetch); null where this broker holds no replica, or leads it
            # since an election too recent for its high watermark to be its end yet
            # (OFFSET_NOT_AVAILABLE to ListOffsets: a lag to it would be too small).
            plog = self.rt.placement.local_log(t, p)
            if plog is not None and self.rt.placement.offsets_error(t, p) is not None:
                plog = None
            hw = None if plog is None else plog.high_watermark
            lso = None if plog is None else plog.last_stable_offset
            end = lso if read_committed else hw
            offsets.append(
                {
                    "topic": t,
                    "partition": p,
                    "offset": v.offset,
                    "leader_epoch": v.leader_epoch,
                    "metadata": v.metadata,
                    "commit_timestamp": v.commit_timestamp,
                    "high_watermark": hw,
                    "last_stable_offset": lso,
                    "lag": None if end is None else max(0, end - v.offset),
                }
            )
        return offsets

    async def delete_group(self, group_id: str) -> None:
        group = self._get(group_id)
        await self.rt.ensure_topic()
        # Checked after the await: a member may have joined (or leadership moved) meanwhile.
        partition = self.rt.route(group_id)
        if self.rt.groups.get(group_id) is not group:
            raise GroupIdNotFound(group_id)
        if group.member_count():
            raise NonEmptyGroup(group_id, group.member_count(), "deleting it")
        self.offsets.drop(group)
        await self.rt.replicated(group_id, partition)

    async def reset_offsets(
        self,
        group_id: str,
        topic: str,
        to: str,
        *,
        partitions: Sequence[int] | None = None,
        value: int | None = None,
        read_committed: bool = False,
    ) -> list[CommittedOffset]:
        """Set an empty group's offsets on ``topic`` to earliest, latest, the first offset
        at or after a timestamp (``value`` ms), or ``value`` clamped to the log's range.
        The log's end is its high watermark, or with ``read_committed`` its last stable
        offset (a read_committed group reset to latest must not skip the records of a
        transaction still open: they may yet commit). A replica here that leads since an
        election too recent for its high watermark to be its end refuses every target but
        earliest (each is bounded by the end) with OffsetNotAvailable (retriable), as
        ListOffsets refuses latest (:func:`app.core.topology.list_offset`), before
        anything is written."""
        self.rt.check_loaded()
        validate_group_id(group_id)
        if to not in ("earliest", "latest", "timestamp", "offset"):
            raise InvalidRequest(f"to must be earliest, latest, timestamp or offset, not {to!r}")
        if to in ("timestamp", "offset") and value is None:
            raise InvalidRequest(f"resetting to {to} needs a value")
        check_committable(topic)
        count = self.rt.placement.partition_count(topic)
        parts = sorted(set(range(count) if partitions is None else partitions))
        for p in parts:
            if not 0 <= p < count:
                raise UnknownTopicOrPartition(topic, p)
        await self.rt.ensure_topic()
        partition = self.rt.route(group_id)
        group = self.rt.groups.get(group_id)
        if group is not None and group.member_count():
            raise NonEmptyGroup(group_id, group.member_count(), "resetting offsets")
        commits = []
        for p in parts:
            plog = self.rt.placement.local_log(topic, p)
            if plog is None:
                # Cluster mode: the offsets of a partition held elsewhere are its leader's.
                raise InvalidRequest(
                    f"{topic}-{p} has no replica on this broker (the group's coordinator), "
                    "so its offsets are not known here: look them up at its leader "
                    f"(GET /topics/{topic}/partitions/{p}/offsets) and commit them with "
                    "member_epoch -1"
                )
            if to == "earliest":
                offset = plog.log_start_offset
            else:
                # Every other target is bounded by the end: the rule of ListOffsets latest.
                end, _ = list_offset(
                    plog,
                    "latest",
                    read_committed=read_committed,
                    unavailable=self.rt.placement.offsets_error(topic, p),
                )
                if to == "latest":
                    offset = end
                elif to == "timestamp":
                    assert value is not None
                    found = plog.offset_for_timestamp(value)
                    offset = end if found is None else min(found[0], end)
                else:
                    assert value is not None
                    offset = min(max(value, plog.log_start_offset), end)
            commits.append(OffsetCommit(topic, p, offset))
        done = self.offsets.write_offsets(group_id, commits)
        await self.rt.replicated(group_id, partition)
        return done


def _protocol(group: Group) -> str:
    """ "classic" for a group of JoinGroup members (or one that had them and has no
    consumer-protocol members since), else "consumer" (KIP-848)."""
    return "classic" if group.classic is not None and not group.members else "consumer"


def _protocol_type(group: Group) -> str:
    if group.classic is not None and not group.members:
        return group.classic.protocol_type or "consumer"
    return "consumer"
