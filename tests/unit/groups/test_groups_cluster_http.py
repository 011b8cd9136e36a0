"""The group endpoints of a broker in cluster mode (a fake ReplicaManager in AppState)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from groups_cluster_fakes import URLS, FakeCluster, group_in
from starlette.testclient import TestClient

from app.api import create_app
from app.config import Settings
from app.core.log import LogManager
from app.groups.coordinator import OFFSETS_TOPIC

N = 3
MINE = group_in(0, N)
THEIRS = group_in(1, N)


@pytest.fixture
def cluster(manager: LogManager) -> FakeCluster:
    fake = FakeCluster(manager, 1)
    fake.add_topic("t", 2)
    return fake


@pytest.fixture
def client(tmp_path: Path, manager: LogManager, cluster: FakeCluster) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path / "data",
        broker_id=1,
        advertised_url=URLS[1],
        offsets_topic_num_partitions=N,
    )
    app = create_app(settings, manager)
    app.state.logbus.topology = cluster
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_find_coordinator_and_not_coordinator(client: TestClient, cluster: FakeCluster) -> None:
    r = client.post("/coordinator", json={"key": THEIRS})
    assert r.status_code == 200, r.text
    assert r.json() == {"node_id": 2, "url": URLS[2], "key": THEIRS, "partition": 1}
    assert cluster.created == [(OFFSETS_TOPIC, N, 3, {"cleanup.policy": "compact"})]

    r = client.post(f"/groups/{THEIRS}/heartbeat", json={"subscribed_topics": ["t"]})
    assert r.status_code == 421, r.text
    body = r.json()
    assert body["error_code"] == "NOT_COORDINATOR" and body["retriable"] is True
    assert (body["group"], body["coordinator"], body["coordinator_url"]) == (THEIRS, 2, URLS[2])
    for method, path in (
        ("GET", f"/groups/{THEIRS}"),
        ("GET", f"/groups/{THEIRS}/offsets"),
        ("DELETE", f"/groups/{THEIRS}"),
    ):
        r = client.request(method, path)
        assert r.status_code == 421 and r.json()["coordinator_url"] == URLS[2], (path, r.text)

    r = client.post(f"/groups/{MINE}/heartbeat", json={"subscribed_topics": ["t"]})
    assert r.status_code == 200, r.text
    r = client.post(
        f"/groups/{MINE}/offsets",
        json={"offsets": [{"topic": "t", "partition": 0, "offset": 4}]},
    )
    assert r.status_code == 404  # a member is in the group: commits need its id and epoch
    assert [g["group"] for g in client.get("/groups").json()["groups"]] == [MINE]

    cluster.set_leader(OFFSETS_TOPIC, 1, None)
    r = client.post("/coordinator", json={"key": THEIRS})
    assert r.status_code == 503, r.text
    assert r.json()["error_code"] == "COORDINATOR_NOT_AVAILABLE" and r.json()["retriable"]
