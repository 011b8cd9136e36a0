"""The __consumer_offsets key/value codec: round trips and the documented layout."""

from __future__ import annotations

import orjson
import pytest

from app.common.errors import CorruptRecord
from app.groups.records import (
    ClassicGroupKey,
    ClassicGroupValue,
    ClassicMemberValue,
    GroupKey,
    GroupValue,
    MemberKey,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def test_offset_key_layout_is_type_then_json() -> None:
    assert encode_key(OffsetKey("g", "t", 3)) == b'\x00\x01["g","t",3]'
    assert encode_key(GroupKey("g")) == b'\x00\x03["g"]'


def test_offset_round_trip() -> None:
    key = OffsetKey("grp", "orders", 7)
    value = OffsetValue(offset=42, leader_epoch=3, metadata="ünïcode", commit_timestamp=1700)
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value
    assert decode_value(key, None) is None  # tombstone


def test_group_and_member_round_trip() -> None:
    key = GroupKey("grp")
    value = GroupValue(assignor="range", group_epoch=5, assignment_epoch=5, topics={"a": 3})
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value
    mkey = MemberKey("grp", "m1")
    assert encode_key(mkey) == b'\x00\x05["grp","m1"]'
    members = [
        MemberValue(
            member_id="m1",
            instance_id="i1",
            member_epoch=5,
            previous_member_epoch=4,
            subscribed_topics=["a", "b"],
            subscribed_topic_regex=None,
            server_assignor="range",
            rebalance_timeout_ms=1000,
            assigned=[("a", 0), ("a", 1)],
            revoking=[("b", 0)],
            target=[("a", 0), ("a", 1), ("a", 2)],
        ),
        MemberValue("m2", None, 3, 2, [], "a.*", None, 300_000),
    ]
    for member in members:
        assert decode_key(encode_key(mkey)) == mkey
        assert decode_value(mkey, encode_value(member)) == member
    assert decode_value(mkey, None) is None


def test_keys_are_deterministic_for_compaction() -> None:
    assert encode_key(OffsetKey("g", "t", 1)) == encode_key(OffsetKey("g", "t", 1))
    assert encode_key(OffsetKey("g", "t", 1)) != encode_key(OffsetKey("g", "t", 2))


def test_unknown_key_type_is_skipped_and_garbage_is_corrupt() -> None:
    assert decode_key(b"\x00\x09[1]") is None
    with pytest.raises(CorruptRecord):
        decode_key(b"\x00")
    with pytest.raises(CorruptRecord):
        decode_key(b"\x00\x01not json")
    with pytest.raises(CorruptRecord):
        decode_value(OffsetKey("g", "t", 0), b"\x00\x00{}")


def test_group_and_member_values_are_version_1_and_version_0_stays_readable() -> None:
    """v1 adds a group's empty-since time and a static member's temporary leave; values
    an older broker wrote (v0, without them) read as never left, empty-since unknown."""
    gkey, mkey = GroupKey("g"), MemberKey("g", "m")
    group = GroupValue("uniform", 3, 3, {"t": 2}, empty_since_ms=1_700_000)
    member = MemberValue("m", "i", 4, 3, ["t"], None, None, 1000, left_static=True)
    assert encode_value(group)[:2] == encode_value(member)[:2] == b"\x00\x01"
    assert encode_value(OffsetValue(1))[:2] == b"\x00\x00"
    assert decode_value(gkey, encode_value(group)) == group
    assert decode_value(mkey, encode_value(member)) == member
    old_group = (
        b'\x00\x00{"protocol_type":"consumer","assignor":"uniform","group_epoch":3,'
        b'"assignment_epoch":3,"topics":{"t":2}}'
    )
    assert decode_value(gkey, old_group) == GroupValue("uniform", 3, 3, {"t": 2})
    old_member = (
        b'\x00\x00{"member_id":"m","instance_id":"i","member_epoch":4,'
        b'"previous_member_epoch":3,"subscribed_topics":["t"],"subscribed_topic_regex":null,'
        b'"server_assignor":null,"rebalance_timeout_ms":1000,"assigned":[["t",0]],'
        b'"revoking":[],"target":[["t",0]]}'
    )
    decoded = decode_value(mkey, old_member)
    assert isinstance(decoded, MemberValue)
    assert not decoded.left_static and decoded.assigned == [("t", 0)]


def _classic_group() -> ClassicGroupValue:
    return ClassicGroupValue(
        protocol_type="consumer",
        generation=7,
        protocol_name="range",
        leader="m1",
        current_state_timestamp=1_700_000,
        members=(
            ClassicMemberValue(
                "m1", None, "rdkafka", "/127.0.0.1", 300_000, 45_000, b"\x00\x01s", b"\xff"
            ),
            ClassicMemberValue("m2", "i-2", "", "", 60_000, 10_000, b"", b""),
        ),
    )


def test_classic_group_key_is_type_2_and_its_value_round_trips() -> None:
    """Kafka's GroupMetadata record (type 2): the group's generation, protocol, leader and
    members with their subscription and assignment bytes (base64 in the JSON)."""
    key = ClassicGroupKey("grp")
    assert encode_key(key) == b'\x00\x02["grp"]'
    assert decode_key(encode_key(key)) == key
    assert encode_key(key) != encode_key(GroupKey("grp"))  # its own key, beside KIP-848's
    value = _classic_group()
    data = encode_value(value)
    assert data[:2] == b"\x00\x00"  # version 0 of its own type
    body = orjson.loads(data[2:])
    assert (
        body["members"][0]["subscription"] == "AAFz" and body["members"][0]["assignment"] == "/w=="
    )
    assert decode_value(key, data) == value
    empty = ClassicGroupValue("consumer", 8, None, None, 1_800_000)
    assert decode_value(key, encode_value(empty)) == empty
    assert decode_value(key, None) is None  # the group deleted: a tombstone


def test_a_newer_classic_group_version_is_read_for_the_fields_known() -> None:
    key = ClassicGroupKey("g")
    body = orjson.loads(encode_value(_classic_group())[2:])
    body["future"] = {"x": 1}
    body["members"][1]["future_member_field"] = 3
    assert decode_value(key, b"\x00\x05" + orjson.dumps(body)) == _classic_group()
    # Fields an older writer may have left out take their defaults.
    minimal = (
        b'\x00\x00{"protocol_type":"consumer","generation":2,"members":[{"member_id":"m",'
        b'"rebalance_timeout_ms":1,"session_timeout_ms":2}]}'
    )
    assert decode_value(key, minimal) == ClassicGroupValue(
        "consumer", 2, None, None, 0, (ClassicMemberValue("m", None, "", "", 1, 2, b"", b""),)
    )
    for bad in (
        b'\x00\x00{"generation":1}',
        b'\x00\x00{"protocol_type":"c","generation":1,'
        b'"members":[{"member_id":"m","rebalance_timeout_ms":1,"session_timeout_ms":2,'
        b'"subscription":"not base64!"}]}',
    ):
        with pytest.raises(CorruptRecord):
            decode_value(key, bad)
