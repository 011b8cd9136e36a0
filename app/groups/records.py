"""Keys and values of the records in ``__consumer_offsets``.

Layout (all records are ordinary RecordBatch v2 records, so compaction keeps
the latest value per key and a null value is a tombstone)::

    key   = type:int16 big-endian + JSON array (orjson, no spaces)
            type 1  offset commit    ["<group>", "<topic>", <partition>]
            type 2  classic group    ["<group>"]
            type 3  group metadata   ["<group>"]
            type 5  group member     ["<group>", "<member id>"]
    value = version:int16 big-endian + JSON object, or null (tombstone)
            offset commit   v0 {"offset", "leader_epoch", "metadata", "commit_timestamp"}
            classic group   v0 {"protocol_type", "generation", "protocol_name", "leader",
                                "current_state_timestamp", "members": [{"member_id",
                                "instance_id", "client_id", "client_host",
                                "rebalance_timeout_ms", "session_timeout_ms",
                                "subscription", "assignment"}, ...]}
                                (a JoinGroup/SyncGroup group, Kafka's GroupMetadataValue:
                                written when a generation's assignment is stored and
                                when the group becomes empty, members [] and leader and
                                protocol_name null then; subscription and assignment are
                                the client's bytes in base64; current_state_timestamp is
                                wall-clock ms of the state, for an empty group the
                                offsets-retention clock)
            group metadata  v0 {"protocol_type", "assignor", "group_epoch",
                                "assignment_epoch", "topics": {topic: partitions}}
                            v1 adds "empty_since_ms" (wall-clock ms the group last
                                became empty: the offsets-retention clock)
            group member    v0 {"member_id", "instance_id", "member_epoch",
                                "previous_member_epoch", "subscribed_topics",
                                "subscribed_topic_regex", "server_assignor",
                                "rebalance_timeout_ms", "assigned": [[topic, p], ...],
                                "revoking": [[topic, p], ...], "target": [[topic, p], ...]}
                            v1 adds "left_static" (a static member's temporary leave,
                                epoch -2: its instance may come back under a new id)

Versions, as Kafka's group metadata values: a new field comes with a new
version; values are written at the current version of their type and every
older version stays readable (a missing field takes the value an older
broker meant: never left, empty since its last commit). A newer version than
this code knows is read for the fields it knows, so a downgraded broker still
loads its groups; a record type it does not know is skipped (a broker older than
type 2 loads a classic group's offsets only: its members rejoin, as they did then).

The key is a byte-exact function of its fields (orjson emits no optional
whitespace), which compaction relies on. A member is its own record, as in
Kafka, so a heartbeat that moves one member rewrites that member only, not the
whole group; a classic group is one record with its members, as Kafka's (it is
written once per generation, never on heartbeats). The type numbers follow
Kafka's record types (1 = OffsetCommitKey, 2 = GroupMetadataKey, 3 =
ConsumerGroupMetadataKey, 5 = ConsumerGroupMemberMetadataKey) though the encodings
are our own JSON, readable with any tool.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any

import orjson

from app.common.errors import CorruptRecord

OFFSET_COMMIT_KEY = 1
CLASSIC_GROUP_KEY = 2
GROUP_METADATA_KEY = 3
MEMBER_KEY = 5
# The version each value type is written at (see the module docstring).
OFFSET_VALUE_VERSION = 0
GROUP_VALUE_VERSION = 1
MEMBER_VALUE_VERSION = 1
CLASSIC_GROUP_VALUE_VERSION = 0

_SHORT = struct.Struct(">h")

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class ClassicGroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class MemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0


@dataclass(slots=True)
class MemberValue:
    member_id: str
    instance_id: str | None
    member_epoch: int
    previous_member_epoch: int
    subscribed_topics: list[str]
    subscribed_topic_regex: str | None
    server_assignor: str | None
    rebalance_timeout_ms: int
    assigned: list[TopicPartition] = field(default_factory=list)
    revoking: list[TopicPartition] = field(default_factory=list)
    target: list[TopicPartition] = field(default_factory=list)
    # v1: left with epoch -2, its instance not back yet.
    left_static: bool = False


@dataclass(slots=True)
class GroupValue:
    assignor: str
    group_epoch: int
    assignment_epoch: int
    topics: dict[str, int]
    protocol_type: str = "consumer"
    # v1: when the group last became empty (0: not recorded, an older version).
    empty_since_ms: int = 0


@dataclass(frozen=True, slots=True)
class ClassicMemberValue:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    # The member's metadata for the generation's protocol, and the leader's assignment.
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicGroupValue:
    protocol_type: str
    generation: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[ClassicMemberValue, ...] = ()


Key = OffsetKey | ClassicGroupKey | GroupKey | MemberKey
Value = OffsetValue | ClassicGroupValue | GroupValue | MemberValue


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        return _SHORT.pack(OFFSET_COMMIT_KEY) + orjson.dumps([key.group, key.topic, key.partition])
    if isinstance(key, MemberKey):
        return _SHORT.pack(MEMBER_KEY) + orjson.dumps([key.group, key.member_id])
    if isinstance(key, ClassicGroupKey):
        return _SHORT.pack(CLASSIC_GROUP_KEY) + orjson.dumps([key.group])
    return _SHORT.pack(GROUP_METADATA_KEY) + orjson.dumps([key.group])


def decode_key(data: bytes) -> Key | None:
    """The key, or None for a record type this version does not know (skipped on load)."""
    if len(data) < 2:
        raise CorruptRecord(f"__consumer_offsets key of {len(data)} bytes is too short")
    (kind,) = _SHORT.unpack_from(data)
    try:
        fields = orjson.loads(data[2:])
        if kind == OFFSET_COMMIT_KEY:
            group, topic, partition = fields
            return OffsetKey(str(group), str(topic), int(partition))
        if kind == GROUP_METADATA_KEY:
            (group,) = fields
            return GroupKey(str(group))
        if kind == CLASSIC_GROUP_KEY:
            (group,) = fields
            return ClassicGroupKey(str(group))
        if kind == MEMBER_KEY:
            group, member_id = fields
            return MemberKey(str(group), str(member_id))
    except (orjson.JSONDecodeError, ValueError, TypeError) as exc:
        raise CorruptRecord(f"bad __consumer_offsets key of type {kind}: {exc}") from None
    return None


def _tps(items: list[TopicPartition]) -> list[list[Any]]:
    return [[t, p] for t, p in sorted(items)]


# The version each value type is written with; its body is the dataclass's fields by name.
_VALUE_VERSIONS: dict[type, int] = {
    OffsetValue: OFFSET_VALUE_VERSION,
    GroupValue: GROUP_VALUE_VERSION,
    MemberValue: MEMBER_VALUE_VERSION,
    ClassicGroupValue: CLASSIC_GROUP_VALUE_VERSION,
}
# Fields holding (topic, partition) lists: written sorted, as [topic, partition] pairs.
_TP_LIST_FIELDS = frozenset({"assigned", "revoking", "target"})


def encode_value(value: Value) -> bytes:
    """The version (2 bytes) and a JSON object of every field of ``value`` by name (a field
    added to a value class is written too; :func:`decode_value` reads it by name)."""
    return _SHORT.pack(_VALUE_VERSIONS[type(value)]) + orjson.dumps(_body(value))


def _body(value: Any) -> dict[str, Any]:
    """A value's fields by name: (topic, partition) lists as sorted pairs, bytes in
    base64, nested values (a classic group's members) as objects of their own."""
    body: dict[str, Any] = {}
    for f in dataclass_fields(value):
        item = getattr(value, f.name)
        if f.name in _TP_LIST_FIELDS:
            item = _tps(item)
        elif isinstance(item, bytes):
            item = base64.b64encode(item).decode("ascii")
        elif isinstance(item, tuple):
            item = [_body(x) for x in item]
        body[f.name] = item
    return body


def _tp_list(raw: Any) -> list[TopicPartition]:
    return [(str(t), int(p)) for t, p in raw]


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """The value for ``key``; None for a tombstone."""
    if data is None:
        return None
    if len(data) < 2:
        raise CorruptRecord(f"__consumer_offsets value of {len(data)} bytes is too short")
    try:
        body = orjson.loads(data[2:])
        if isinstance(key, OffsetKey):
            return OffsetValue(
                offset=int(body["offset"]),
                leader_epoch=int(body.get("leader_epoch", -1)),
                metadata=str(body.get("metadata") or ""),
                commit_timestamp=int(body.get("commit_timestamp", 0)),
            )
        if isinstance(key, ClassicGroupKey):
            return _classic_group(body)
        if isinstance(key, MemberKey):
            return MemberValue(
                member_id=str(body["member_id"]),
                instance_id=body.get("instance_id"),
                member_epoch=int(body["member_epoch"]),
                previous_member_epoch=int(body.get("previous_member_epoch", -1)),
                subscribed_topics=[str(t) for t in body.get("subscribed_topics") or []],
                subscribed_topic_regex=body.get("subscribed_topic_regex"),
                server_assignor=body.get("server_assignor"),
                rebalance_timeout_ms=int(body.get("rebalance_timeout_ms", 300_000)),
                assigned=_tp_list(body.get("assigned", [])),
                revoking=_tp_list(body.get("revoking", [])),
                target=_tp_list(body.get("target", [])),
                left_static=bool(body.get("left_static", False)),
            )
        return GroupValue(
            assignor=str(body["assignor"]),
            group_epoch=int(body["group_epoch"]),
            assignment_epoch=int(body["assignment_epoch"]),
            topics={str(t): int(n) for t, n in body.get("topics", {}).items()},
            protocol_type=str(body.get("protocol_type", "consumer")),
            empty_since_ms=int(body.get("empty_since_ms", 0)),
        )
    except (orjson.JSONDecodeError, KeyError, ValueError, TypeError, AttributeError) as exc:
        raise CorruptRecord(f"bad __consumer_offsets value: {exc}") from None


def _optional_str(raw: Any) -> str | None:
    return None if raw is None else str(raw)


def _classic_group(body: dict[str, Any]) -> ClassicGroupValue:
    return ClassicGroupValue(
        protocol_type=str(body["protocol_type"]),
        generation=int(body["generation"]),
        protocol_name=_optional_str(body.get("protocol_name")),
        leader=_optional_str(body.get("leader")),
        current_state_timestamp=int(body.get("current_state_timestamp", 0)),
        members=tuple(
            ClassicMemberValue(
                member_id=str(m["member_id"]),
                instance_id=_optional_str(m.get("instance_id")),
                client_id=str(m.get("client_id") or ""),
                client_host=str(m.get("client_host") or ""),
                rebalance_timeout_ms=int(m["rebalance_timeout_ms"]),
                session_timeout_ms=int(m["session_timeout_ms"]),
                subscription=base64.b64decode(m.get("subscription") or "", validate=True),
                assignment=base64.b64decode(m.get("assignment") or "", validate=True),
            )
            for m in body.get("members") or ()
        ),
    )
