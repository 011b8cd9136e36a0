"""The consumer-group branch of the one error tree (:mod:`app.common.errors`).

Raised by the group coordinators (``app.groups``: KIP-848 and the classic protocol) and
answered through every door; split from :mod:`app.common.errors` for size, as the schema
branch is (:mod:`app.common.schema_errors`). Every class is a ``LogbusError`` with its
Kafka error name, so the HTTP mapping, the SDK's reading of an answer body and the Kafka
door treat it like any other.

::

    LogbusError
    └── GroupError                     consumer groups (app.groups)
        ├── UnsupportedAssignor        UNSUPPORTED_ASSIGNOR         (400)
        ├── InvalidGroupId             INVALID_GROUP_ID             (400)
        ├── GroupIdNotFound            GROUP_ID_NOT_FOUND           (404)
        ├── UnknownMemberId            UNKNOWN_MEMBER_ID            (404, rejoin with epoch 0)
        ├── FencedMemberEpoch          FENCED_MEMBER_EPOCH          (409, rejoin with epoch 0)
        ├── StaleMemberEpoch           STALE_MEMBER_EPOCH           (409, heartbeat, then retry)
        ├── UnreleasedInstanceId       UNRELEASED_INSTANCE_ID       (409)
        ├── NonEmptyGroup              NON_EMPTY_GROUP              (409)
        ├── CoordinatorLoadInProgress  COORDINATOR_LOAD_IN_PROGRESS (503, retriable)
        ├── CoordinatorNotAvailable    COORDINATOR_NOT_AVAILABLE    (503, retriable)
        ├── RebalanceInProgress        REBALANCE_IN_PROGRESS        (classic: rejoin)
        ├── IllegalGeneration          ILLEGAL_GENERATION           (classic: rejoin)
        ├── MemberIdRequired           MEMBER_ID_REQUIRED           (classic, KIP-394)
        ├── FencedInstanceId           FENCED_INSTANCE_ID           (classic static member)
        ├── InconsistentGroupProtocol  INCONSISTENT_GROUP_PROTOCOL  (classic vs KIP-848)
        ├── InvalidSessionTimeout      INVALID_SESSION_TIMEOUT      (classic)
        ├── GroupSubscribedToTopic     GROUP_SUBSCRIBED_TO_TOPIC    (OffsetDelete)
        ├── GroupMaxSizeReached        GROUP_MAX_SIZE_REACHED       (classic, group_max_size)
        └── UnstableOffsetCommit       UNSTABLE_OFFSET_COMMIT       (409, retriable: KIP-447)
"""

from __future__ import annotations

from typing import Any

from app.common.errors import LogbusError


class GroupError(LogbusError):
    """A consumer group request the coordinator refused (``app.groups``)."""

    group: str | None

    def __init__(self, message: str, group: str | None = None, **fields: Any) -> None:
        # No group (a request naming none): no "group" key in the body either.
        super().__init__(message, **({} if group is None else {"group": group}), **fields)
        self.group = group


class UnsupportedAssignor(GroupError, error_code="UNSUPPORTED_ASSIGNOR"):
    """A member names a server-side assignor the broker does not have."""


class InvalidGroupId(GroupError, error_code="INVALID_GROUP_ID"):
    """An empty group id, or one over ``MAX_GROUP_ID_LENGTH`` characters."""


class GroupIdNotFound(GroupError, error_code="GROUP_ID_NOT_FOUND"):
    """No group with this id."""

    def __init__(self, group: str) -> None:
        super().__init__(f"group {group!r} does not exist", group)


class UnknownMemberId(GroupError, error_code="UNKNOWN_MEMBER_ID"):
    """The member is not (or no longer) in the group: it must rejoin with epoch 0."""

    member_id: str

    def __init__(self, group: str, member_id: str) -> None:
        super().__init__(
            f"member {member_id!r} is not in group {group!r}", group, member_id=member_id
        )


class _EpochError(GroupError):
    """A member's epoch is not the one the coordinator expects (base of the two below)."""

    member_id: str
    member_epoch: int
    current_epoch: int

    def __init__(self, group: str, member_id: str, epoch: int, current: int, what: str) -> None:
        super().__init__(
            f"member {member_id!r} of group {group!r} sent epoch {epoch}, "
            f"its epoch is {current}: {what}",
            group,
            member_id=member_id,
            member_epoch=epoch,
            current_epoch=current,
        )


class FencedMemberEpoch(_EpochError, error_code="FENCED_MEMBER_EPOCH"):
    """The member's epoch is not one the coordinator handed it: it must rejoin (epoch 0)."""

    def __init__(self, group: str, member_id: str, epoch: int, current: int) -> None:
        super().__init__(group, member_id, epoch, current, "rejoin with member_epoch 0")


class StaleMemberEpoch(_EpochError, error_code="STALE_MEMBER_EPOCH"):
    """An offset commit carried an older epoch than the member's: heartbeat first."""

    def __init__(self, group: str, member_id: str, epoch: int, current: int) -> None:
        super().__init__(group, member_id, epoch, current, "heartbeat to learn the new epoch")


class UnreleasedInstanceId(GroupError, error_code="UNRELEASED_INSTANCE_ID"):
    """A static member joined while another member still holds its instance id."""

    instance_id: str

    def __init__(self, group: str, instance_id: str) -> None:
        super().__init__(
            f"instance id {instance_id!r} of group {group!r} is still held by an active member; "
            "it is released by a leave with member_epoch -2 or by its session timeout",
            group,
            instance_id=instance_id,
        )


class NonEmptyGroup(GroupError, error_code="NON_EMPTY_GROUP"):
    """An action that needs an empty group (delete it, reset its offsets) while it has members."""

    members: int

    def __init__(self, group: str, members: int, action: str) -> None:
        super().__init__(
            f"group {group!r} has {members} member(s): {action} needs an empty group",
            group,
            members=members,
        )


class CoordinatorLoadInProgress(
    GroupError, error_code="COORDINATOR_LOAD_IN_PROGRESS", retriable=True
):
    """The group's ``__consumer_offsets`` partition is still being loaded: retry shortly."""


class CoordinatorNotAvailable(GroupError, error_code="COORDINATOR_NOT_AVAILABLE", retriable=True):
    """No broker can coordinate the group right now: its ``__consumer_offsets`` partition
    has no leader (election under way), or its in-sync replicas did not take a write."""


# -- the classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup: app.groups.classic)


class RebalanceInProgress(GroupError, error_code="REBALANCE_IN_PROGRESS"):
    """The group is rebalancing: the member must rejoin (JoinGroup) to learn its new
    generation before it heartbeats, syncs or commits again."""


class IllegalGeneration(GroupError, error_code="ILLEGAL_GENERATION"):
    """A classic member sent a generation that is not the group's: it must rejoin."""

    def __init__(self, group: str, member_id: str, generation: int, current: int) -> None:
        super().__init__(
            f"member {member_id!r} of group {group!r} sent generation {generation}, "
            f"the group's is {current}: rejoin",
            group,
            member_id=member_id,
            generation=generation,
            current_generation=current,
        )


class MemberIdRequired(GroupError, error_code="MEMBER_ID_REQUIRED"):
    """KIP-394: a new dynamic member is handed its id and must join again with it."""

    member_id: str

    def __init__(self, group: str, member_id: str) -> None:
        super().__init__(
            f"a new member of group {group!r} must join again with its member id {member_id!r}",
            group,
            member_id=member_id,
        )


class FencedInstanceId(GroupError, error_code="FENCED_INSTANCE_ID"):
    """A static member's instance id is held by a newer incarnation (another member id)."""

    def __init__(self, group: str, instance_id: str, member_id: str) -> None:
        super().__init__(
            f"instance id {instance_id!r} of group {group!r} belongs to another member than "
            f"{member_id!r} now (a newer incarnation joined)",
            group,
            instance_id=instance_id,
            member_id=member_id,
        )


class InconsistentGroupProtocol(GroupError, error_code="INCONSISTENT_GROUP_PROTOCOL"):
    """A member's protocol type or assignors fit no other member's, or a classic member
    joins a consumer-protocol (KIP-848) group or the other way round."""


class InvalidSessionTimeout(GroupError, error_code="INVALID_SESSION_TIMEOUT"):
    """A classic member's session timeout is outside the broker's
    ``group_min_session_timeout_ms`` .. ``group_max_session_timeout_ms``."""


class GroupSubscribedToTopic(GroupError, error_code="GROUP_SUBSCRIBED_TO_TOPIC"):
    """OffsetDelete of a topic the group's members are subscribed to now."""


class GroupMaxSizeReached(GroupError, error_code="GROUP_MAX_SIZE_REACHED"):
    """A classic group already has ``group_max_size`` members (pending ones counted)."""


class UnstableOffsetCommit(GroupError, error_code="UNSTABLE_OFFSET_COMMIT", retriable=True):
    """OffsetFetch with ``require_stable`` (KIP-447): offsets of these partitions were
    committed in a transaction that has not ended yet (its marker is still to be
    written); retry once it has, as Kafka's transactional consumers do."""
