"""Client quotas in ZooKeeper (app/core/replication/zk_quotas.py) against a real ZooKeeper:
Kafka's ``/config/users``, ``/config/clients`` layout and value format, change notices
under ``/config/changes``, and every broker's store reloading within a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import orjson
import pytest
from zookeeper import ZooKeeperServer

from app.core.replication.zk_quotas import ZkQuotaStore
from app.core.security.quotas import DEFAULT, FETCH, PRODUCE, REQUEST, Entity, QuotaConfig


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
    deadline = time.monotonic() + 1.0
    while reader.load().quotas != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert reader.load().quotas == expected, "not reloaded within a second"
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
    deadline = time.monotonic() + 1.0
    while Entity("alice") in reader.load().quotas and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Entity("alice") not in reader.load().quotas
    assert reader.load().quotas[Entity("alice", "etl/1")] == {FETCH: 2048.0}
