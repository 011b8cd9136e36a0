"""The consumer's rules without a broker: flows driven by hand, answers fed in.

The flows (app/client/consumer/base.py) yield the calls they need; here the
test is the shell, so each rule is checked step by step.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from app import wire
from app.client import Consumer, TopicPartition
from app.client.consumer.base import BeatNow, GroupCall, LeaderCall
from app.client.group import GroupMembership
from app.common.group_errors import FencedMemberEpoch, StaleMemberEpoch

TP = TopicPartition("t", 0)


@pytest.fixture
def consumer() -> Iterator[Consumer]:
    c = Consumer("http://broker.test:9", auto_offset_reset="earliest")
    try:
        yield c
    finally:
        c.close()


def grouped(c: Consumer) -> GroupMembership:
    """A membership that is never started: no heartbeat, no I/O."""
    group = GroupMembership(
        c.cluster,
        "g",
        topics=["t"],
        pattern=None,
        instance_id=None,
        server_assignor=None,
        rebalance_timeout_ms=None,
        request_timeout_ms=1_000,
        retry_backoff_ms=100,
    )
    c._group = group
    return group


def test_a_stale_epoch_commit_heartbeats_then_retries_once(consumer: Consumer) -> None:
    grouped(consumer)
    flow = consumer._commit_flow({TP: 5})
    first = next(flow)
    assert isinstance(first, GroupCall) and first.group_id == "g"
    assert isinstance(flow.throw(StaleMemberEpoch("g", "m", 1, 2)), BeatNow)
    assert isinstance(flow.send(None), GroupCall)
    with pytest.raises(StopIteration):
        flow.send(None)


def test_a_fenced_commit_marks_the_member_lost_and_raises(consumer: Consumer) -> None:
    group = grouped(consumer)
    flow = consumer._commit_flow({TP: 5})
    next(flow)
    with pytest.raises(FencedMemberEpoch):
        flow.throw(FencedMemberEpoch("g", "m", 1, 2))
    assert group.take() == (True, None)


def test_a_missing_position_is_looked_up_at_the_leader(consumer: Consumer) -> None:
    consumer.assign([TP])
    flow = consumer._position_flow(TP)
    call = next(flow)
    assert isinstance(call, LeaderCall) and call.tp == TP
    with pytest.raises(StopIteration) as done:
        flow.send((7, -1))
    assert done.value.value == 7
    assert consumer.states[TP].fetch_offset == 7


def test_not_leader_with_a_hint_sends_the_next_fetch_there_once(consumer: Consumer) -> None:
    consumer.assign([TP])
    consumer.seek(TP, 3)
    st = consumer.states[TP]
    st.url = "http://broker.test:9"
    body = orjson.dumps(
        {
            "error_code": "NOT_LEADER_OR_FOLLOWER",
            "message": "not the leader",
            "retriable": True,
            "topic": "t",
            "partition": 0,
            "leader": 2,
            "leader_url": "http://other.test:9",
        }
    )
    consumer._on_answer(st, 3, wire.Response(421, {}, bytearray(body)))
    assert st.redirect == "http://other.test:9" and st.backoff_until == 0
    assert consumer._fetch_url(st) == "http://other.test:9"
    st.url = "http://other.test:9"
    consumer._on_answer(st, 3, wire.Response(421, {}, bytearray(body.replace(b"other", b"third"))))
    assert st.redirect is None and st.backoff_until > 0  # two in a row: back off instead
