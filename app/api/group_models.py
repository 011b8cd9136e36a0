"""Request and response bodies of the consumer-group API (``app/api/routers/groups.py``;
the OpenAPI schemas). Group bodies forbid unknown fields but coerce types as pydantic's
default (:class:`GroupBody`); the rest of the API's bodies are in :mod:`app.api.models`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.models import INT_MAX, LONG_MAX
from app.core.log.topic_rules import MAX_TOPIC_NAME_LENGTH


class GroupBody(BaseModel):
    """A consumer-group request body (``app/api/routers/groups.py``): unknown fields are a
    400, but types coerce as pydantic's default ("1" is 1), as the group API always has
    (unlike :class:`StrictBody`)."""

    model_config = ConfigDict(extra="forbid")


class TopicPartitions(GroupBody):
    topic: str = Field(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)
    partitions: list[Annotated[int, Field(ge=0, le=INT_MAX)]]


class FindCoordinatorRequest(GroupBody):
    key: str = Field(
        description="The group id, or the transactional id with `key_type: transaction`.",
        min_length=1,
        max_length=255,
    )
    key_type: Literal["group", "transaction"] = Field(
        default="group",
        description="`group` (its `__consumer_offsets` partition's leader) or `transaction` "
        "(its `__transaction_state` partition's leader: the transaction coordinator).",
    )


class FindCoordinatorResponse(BaseModel):
    node_id: int = Field(
        description="Broker id of the coordinator (in a cluster: the leader of the group's "
        "partition of `__consumer_offsets`)."
    )
    url: str = Field(description="Where to send the group's requests.")
    key: str
    partition: int = Field(
        description="The key's partition of `__consumer_offsets` (a group) or of "
        "`__transaction_state` (a transactional id)."
    )


class HeartbeatBody(GroupBody):
    member_id: str = Field(
        default="",
        max_length=255,
        description="Empty to join (the broker picks an id), else the id it answered.",
    )
    member_epoch: int = Field(
        default=0,
        ge=-2,
        le=INT_MAX,
        description="0 to join, the current epoch to heartbeat, -1 to leave, -2 for a static "
        "member's temporary leave (it keeps its partitions until its session times out).",
    )
    instance_id: str | None = Field(
        default=None,
        max_length=255,
        description="Static membership: a restarted member with the same instance id keeps "
        "its partitions.",
    )
    subscribed_topics: (
        list[Annotated[str, Field(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)]] | None
    ) = Field(default=None, description="Topic names; null = unchanged since the last heartbeat.")
    subscribed_topic_regex: str | None = Field(
        default=None,
        max_length=1024,
        description="A regular expression matched against whole topic names (internal topics "
        "never match), run under RE2: linear time, no backreferences or lookaround.",
    )
    server_assignor: str | None = Field(
        default=None,
        max_length=64,
        description="`uniform` or `range` (else UNSUPPORTED_ASSIGNOR): the assignor the member "
        "prefers; the group uses the one most members ask for, `uniform` by default.",
    )
    owned_partitions: list[TopicPartitions] | None = Field(
        default=None,
        description="The partitions the member holds now. Null: unchanged since the member "
        "last reported them (as in Kafka); partitions revoked from it are released only by a "
        "list that leaves them out.",
    )
    rebalance_timeout_ms: int | None = Field(
        default=None,
        ge=0,
        le=INT_MAX,
        description="How long the member may take to revoke partitions (default 300000).",
    )


class Assignment(BaseModel):
    partitions: list[TopicPartitions]


class HeartbeatResponseBody(BaseModel):
    member_id: str
    member_epoch: int = Field(description="-1 / -2 after a leave.")
    heartbeat_interval_ms: int = Field(description="Heartbeat again within this interval.")
    assignment: Assignment = Field(
        description="The partitions the member may consume now. Ones missing since the last "
        "answer are revoked: stop fetching them (commit first) and heartbeat."
    )


class OffsetCommitEntry(GroupBody):
    topic: str = Field(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)
    partition: int = Field(ge=0, le=INT_MAX)
    offset: int = Field(ge=0, le=LONG_MAX, description="The next offset to consume.")
    leader_epoch: int = Field(default=-1, ge=-1, le=INT_MAX)
    metadata: str = Field(default="", description="Up to 4096 bytes of free text.")


class OffsetCommitBody(GroupBody):
    member_id: str = Field(default="", max_length=255)
    member_epoch: int = Field(
        default=-1,
        ge=-1,
        le=INT_MAX,
        description="The member's current epoch; -1 (no member) only while the group has no "
        "members (simple consumers, admin tools).",
    )
    offsets: list[OffsetCommitEntry] = Field(min_length=1)


class CommittedOffsetBody(BaseModel):
    topic: str
    partition: int
    offset: int = Field(description="-1 when nothing is committed.")
    leader_epoch: int
    metadata: str
    commit_timestamp: int


class OffsetsResponse(BaseModel):
    group: str
    offsets: list[CommittedOffsetBody]


class ResetOffsetsBody(GroupBody):
    topic: str = Field(min_length=1, max_length=MAX_TOPIC_NAME_LENGTH)
    partitions: list[Annotated[int, Field(ge=0, le=INT_MAX)]] | None = Field(
        default=None, description="Default: every partition of the topic."
    )
    to: Literal["earliest", "latest", "timestamp", "offset"]
    timestamp: int | None = Field(
        default=None, ge=0, le=LONG_MAX, description="With `to: timestamp`, ms since the epoch."
    )
    offset: int | None = Field(
        default=None, ge=0, le=LONG_MAX, description="With `to: offset` (clamped to the log)."
    )
    isolation_level: Literal["read_uncommitted", "read_committed"] = Field(
        default="read_uncommitted",
        description="The group's consumers' isolation level: with `read_committed` the log "
        "ends at its last stable offset (`latest` does not skip a transaction still open).",
    )


class GroupSummary(BaseModel):
    group: str
    state: str = Field(
        description="Empty, Assigning, Reconciling or Stable; a classic group's Empty, "
        "PreparingRebalance, CompletingRebalance or Stable."
    )
    protocol_type: str
    members: int
    group_epoch: int = Field(description="A classic group's generation.")
    protocol: str = Field(
        default="consumer",
        description="consumer (KIP-848: HTTP, WebSocket, the SDK) or classic (JoinGroup "
        "members on the Kafka door, the client's own assignor).",
    )


class GroupList(BaseModel):
    groups: list[GroupSummary]


class MemberDescription(BaseModel):
    member_id: str
    instance_id: str | None
    member_epoch: int
    state: str = Field(description="Stable, UnrevokedPartitions or UnreleasedPartitions.")
    subscribed_topics: list[str]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    assignment: list[TopicPartitions]
    pending_revocation: list[TopicPartitions]
    target_assignment: list[TopicPartitions]


class OffsetLag(BaseModel):
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    high_watermark: int | None
    last_stable_offset: int | None = Field(
        default=None, description="The partition's LSO (null as `high_watermark`)."
    )
    lag: int | None = Field(
        description="high_watermark - offset, or with `isolation_level=read_committed` "
        "last_stable_offset - offset (null if the topic is gone, or in cluster mode "
        "when the coordinator holds no replica of the partition, or leads it since an "
        "election too recent for its high watermark to be the end: OFFSET_NOT_AVAILABLE "
        "to ListOffsets)."
    )


class CoordinatorRef(BaseModel):
    node_id: int
    url: str
    partition: int


class GroupDescription(BaseModel):
    group: str
    state: str
    protocol_type: str
    protocol: str = Field(
        default="consumer",
        description="consumer (KIP-848) or classic (Kafka's JoinGroup/SyncGroup: epochs are "
        "the generation, assignor the client assignor it chose).",
    )
    leader: str | None = Field(default=None, description="A classic group's leader member.")
    group_epoch: int
    assignment_epoch: int
    assignor: str
    coordinator: CoordinatorRef
    members: list[MemberDescription]
    offsets: list[OffsetLag]
