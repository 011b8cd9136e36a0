"""state.py: the JSON records cluster mode keeps in ZooKeeper survive a round trip."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.replication.state import NO_LEADER, BrokerInfo, PartitionState, TopicAssignment

ids = st.integers(min_value=0, max_value=2**31 - 1)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=20)
)


@given(
    st.one_of(st.just(NO_LEADER), ids),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.lists(ids, max_size=6, unique=True).map(tuple),
    st.integers(min_value=0, max_value=2**31 - 1),
)
def test_partition_state_round_trip(
    leader: int, epoch: int, isr: tuple[int, ...], controller_epoch: int
) -> None:
    state = PartitionState(leader, epoch, isr, controller_epoch)
    data = state.to_json()
    assert PartitionState.from_json(data) == state
    assert orjson.loads(data) == {
        "leader": leader,
        "leader_epoch": epoch,
        "isr": list(isr),
        "controller_epoch": controller_epoch,
    }


def test_partition_state_defaults_and_order() -> None:
    # The ISR's order is kept (it is not a set): leaders are elected in replica order.
    state = PartitionState.from_json(b'{"leader": 3, "leader_epoch": 7, "isr": [3, 1, 2]}')
    assert state == PartitionState(3, 7, (3, 1, 2), 0)
    assert isinstance(state.isr, tuple)
    assert PartitionState.from_json(PartitionState(NO_LEADER, 0, ()).to_json()).leader == -1
    with pytest.raises(KeyError):
        PartitionState.from_json(b'{"leader": 1, "isr": []}')


@given(
    st.text(max_size=24),
    st.lists(st.lists(ids, min_size=1, max_size=5, unique=True).map(tuple), max_size=12).map(tuple),
    st.dictionaries(st.text(min_size=1, max_size=30), json_scalars, max_size=5),
)
def test_topic_assignment_round_trip(
    topic_id: str, replicas: tuple[tuple[int, ...], ...], configs: dict[str, Any]
) -> None:
    assignment = TopicAssignment(topic_id, replicas, configs)
    back = TopicAssignment.from_json(assignment.to_json())
    assert back == assignment
    assert back.partitions == len(replicas)
    raw = orjson.loads(assignment.to_json())
    assert raw["partitions"] == {str(p): list(r) for p, r in enumerate(replicas)}


def test_topic_assignment_partition_keys_are_read_by_number_not_text_order() -> None:
    # 12 partitions: "10" sorts before "2" as text; replicas must stay in partition order.
    replicas = tuple((p, p + 100) for p in range(12))
    raw = orjson.loads(TopicAssignment("id", replicas).to_json())
    shuffled = dict(sorted(raw["partitions"].items()))
    data = orjson.dumps({"topic_id": "id", "partitions": shuffled})
    assert TopicAssignment.from_json(data).replicas == replicas


def test_topic_assignment_tolerates_missing_optional_fields() -> None:
    back = TopicAssignment.from_json(b'{"partitions": {"0": [1, 2], "1": [2, 1]}}')
    assert back == TopicAssignment("", ((1, 2), (2, 1)), {})
    # Typed config values stay typed (the controller reads booleans from them).
    typed = TopicAssignment("t", ((1,),), {"unclean.leader.election.enable": False})
    assert TopicAssignment.from_json(typed.to_json()).configs == {
        "unclean.leader.election.enable": False
    }


@given(ids, st.text(max_size=60))
def test_broker_info_round_trip(broker_id: int, url: str) -> None:
    info = BrokerInfo(broker_id, url)
    assert BrokerInfo.from_json(info.to_json()) == info
    assert orjson.loads(info.to_json()) == {"id": broker_id, "url": url}


@given(ids, st.text(max_size=60), st.text(max_size=60), st.integers(0, 65535))
def test_broker_info_with_a_kafka_listener_round_trip(
    broker_id: int, url: str, host: str, port: int
) -> None:
    info = BrokerInfo(broker_id, url, (host, port))
    assert BrokerInfo.from_json(info.to_json()) == info
    assert orjson.loads(info.to_json()) == {
        "id": broker_id,
        "url": url,
        "kafka_listener": {"host": host, "port": port},
    }


def test_a_registration_without_a_kafka_listener_still_parses() -> None:
    # Written by a broker from before the field (a rolling upgrade), or one with no door.
    old = BrokerInfo.from_json(b'{"id": 2, "url": "http://b:8080"}')
    assert old == BrokerInfo(2, "http://b:8080", None)
    assert b"kafka_listener" not in old.to_json()
