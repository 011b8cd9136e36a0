"""Client quotas in ZooKeeper (app/core/replication/zk_quotas.py) against a real ZooKeeper:
Kafka's ``/config/users``, ``/config/clients`` layout and value format, change notices
under ``/config/changes``, and every broker's store reloading within a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from cluster import Cluster
from zookeeper import ZooKeeperServer

from app.common.errors import LogbusError
from app.core.replication.zk_quotas import ZkQuotaStore
from app.core.security.quotas import DEFAULT, FETCH, PRODUCE, REQUEST, Entity, QuotaConfig

# The watch fires within milliseconds on a quiet machine (the issue's "within a
# second"); the bound is loose because a loaded CI host is not a timing instrument.
WATCH_BOUND_SECONDS = 10.0


@pytest.fixture
def stores(zookeeper: ZooKeeperServer) -> Iterator[list[ZkQuotaStore]]:
    made = [ZkQuotaStore(zookeeper.connect_string + "/quotas-test", 6000) for _ in range(2)]
    for store in made:
        store.start()
    yield made
    for store in made:
        store.close()


def test_quotas_reach_every_broker_within_a_second(stores: list[ZkQuotaStore]) -> None:
    writer, reader = stores
    seen: list[QuotaConfig] = []
    changed = threading.Event()

    def on_change(config: QuotaConfig) -> None:
        seen.append(config)
        changed.set()

    reader.watch(on_change)
    writer.alter(
        [
            (Entity("alice"), [(PRODUCE, 1024.0)]),
            (Entity("alice", "etl/1"), [(FETCH, 2048.0)]),
            (Entity(DEFAULT, DEFAULT), [(REQUEST, 10.0)]),
            (Entity(None, "batch"), [(REQUEST, 5.0)]),
        ]
    )
    expected = {
        Entity("alice"): {PRODUCE: 1024.0},
        Entity("alice", "etl/1"): {FETCH: 2048.0},
        Entity(DEFAULT, DEFAULT): {REQUEST: 10.0},
        Entity(None, "batch"): {REQUEST: 5.0},
    }
    deadline = time.monotonic() + WATCH_BOUND_SECONDS
    while reader.load().quotas != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.load().quotas == expected, f"not reloaded within {WATCH_BOUND_SECONDS} s"
    assert changed.is_set()

    # Kafka's layout and value format (names percent-encoded, <default> as is).
    data, _ = writer.client.get("/config/users/alice")
    assert orjson.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1024.0"}}
    assert writer.client.exists("/config/users/alice/clients/etl%2F1")
    assert writer.client.exists("/config/users/<default>/clients/<default>")
    assert writer.client.exists("/config/clients/batch")
    notices = writer.client.get_children("/config/changes")
    assert notices and all(n.startswith("config_change_") for n in notices)

    writer.alter([(Entity("alice"), [(PRODUCE, None)])])
    deadline = time.monotonic() + WATCH_BOUND_SECONDS
    while Entity("alice") in reader.load().quotas and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Entity("alice") not in reader.load().quotas
    assert reader.load().quotas[Entity("alice", "etl/1")] == {FETCH: 2048.0}


def test_an_alteration_touching_an_unreadable_node_writes_nothing(
    stores: list[ZkQuotaStore],
) -> None:
    """All or none: one damaged node (hand-written) refuses the whole alteration, with
    what to fix, before any entity is written, and is left as it was."""
    writer, _ = stores
    writer.client.create("/config/users/mallory", b"[1, 2]", makepath=True)
    with pytest.raises(LogbusError) as refused:
        writer.alter(
            [
                (Entity("carol"), [(PRODUCE, 1.0)]),
                (Entity("mallory"), [(PRODUCE, 2.0)]),
            ]
        )
    assert refused.value.error_code == "UNKNOWN_SERVER_ERROR"
    assert "/config/users/mallory cannot be read" in refused.value.message
    assert "nothing was changed" in refused.value.message
    assert writer.client.exists("/config/users/carol") is None
    assert writer.client.get("/config/users/mallory")[0] == b"[1, 2]"
    assert Entity("carol") not in writer.load().quotas


@pytest.mark.slow
def test_a_quota_set_on_one_broker_throttles_on_another(cluster: Cluster) -> None:
    """Set through broker 1's /quotas, listed and enforced by broker 2 within a second."""
    entry = {
        "entity": [{"entity_type": "client-id", "entity_name": "slow"}],
        "ops": [{"key": "request_rate", "value": 0.5}],
    }
    r = httpx.post(f"{cluster.urls[0]}/quotas", json={"entries": [entry]}, timeout=30)
    assert r.status_code == 200, r.text
    other = cluster.urls[1]
    deadline = time.monotonic() + WATCH_BOUND_SECONDS
    listed: list[object] = []
    while not listed and time.monotonic() < deadline:
        listed = httpx.get(f"{other}/quotas", timeout=30).json()["quotas"]
        time.sleep(0.02)
    assert listed, "the quota did not reach the other broker through the watch"
    # 0.5 requests/s with an 11 s window: a burst of 5.5 requests, then throttled.
    with httpx.Client(base_url=other, headers={"Logbus-Client-Id": "slow"}, timeout=30) as c:
        answers = [c.get("/topics") for _ in range(8)]
    assert all(a.status_code == 200 for a in answers)
    assert "logbus-throttle-time-ms" not in answers[0].headers
    assert "logbus-throttle-time-ms" in answers[-1].headers


def test_names_zookeeper_refuses_as_nodes_are_encoded(stores: list[ZkQuotaStore]) -> None:
    """'.' and '..' are client ids and user names Kafka accepts but node names ZooKeeper
    refuses (kazoo raised ValueError, the door dropped the connection): their dots are
    encoded; '/', '%' and unicode are percent-encoded as Kafka's sanitizer does."""
    writer, reader = stores
    expected = {
        Entity(None, "."): {REQUEST: 1.0},
        Entity(None, ".."): {REQUEST: 2.0},
        Entity("..", "."): {FETCH: 3.0},
        Entity("a/b%c", "ünï"): {PRODUCE: 4.0},
    }
    writer.alter([(entity, [(key, v)]) for entity, q in expected.items() for key, v in q.items()])
    deadline = time.monotonic() + WATCH_BOUND_SECONDS
    while reader.load().quotas != expected:
        assert time.monotonic() < deadline, f"not reloaded within {WATCH_BOUND_SECONDS} s"
        time.sleep(0.01)
    assert sorted(writer.client.get_children("/config/clients")) == ["%2E", "%2E%2E"]
    assert writer.client.exists("/config/users/%2E%2E/clients/%2E")
    assert writer.client.exists("/config/users/a%2Fb%25c/clients/%C3%BCn%C3%AF")
