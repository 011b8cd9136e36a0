"""/quotas (Kafka's DescribeClientQuotas / AlterClientQuotas) and the quota door in the app:
user principals from authentication, client ids from the header or the query, Kafka's
precedence between a user's quota and a default, the throttle header, bad input."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from api_helpers import make_settings
from starlette.testclient import TestClient

from app.api import create_app
from app.core.security.users import UsersFile

THROTTLE = "logbus-throttle-time-ms"


def _basic(name: str) -> dict[str, str]:
    raw = f"{name}:{name}-secret".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    users = UsersFile(tmp_path / "users.json")
    for name in ("alice", "bob"):
        users.add(name, f"{name}-secret", n=2**10)
    settings = make_settings(
        tmp_path,
        authentication="basic",
        users_file=tmp_path / "users.json",
        # Two samples of 0.5 s: a request-rate quota of 1/s lets one request through,
        # then throttles by about a second.
        quota_window_num=2,
        quota_window_size_s=0.5,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def alter(c: TestClient, entity: list[dict[str, Any]], **ops: float | None) -> Any:
    body = {
        "entries": [
            {
                "entity": entity,
                "ops": [
                    {"key": k, "remove": True} if v is None else {"key": k, "value": v}
                    for k, v in ops.items()
                ],
            }
        ]
    }
    r = c.post("/quotas", json=body, headers=_basic("alice"))
    assert r.status_code == 200, r.text
    return r.json()


def user(name: str | None) -> dict[str, Any]:
    return {"entity_type": "user", "entity_name": name}


def client_id(name: str | None) -> dict[str, Any]:
    return {"entity_type": "client-id", "entity_name": name}


def test_alter_and_describe_in_kafkas_shapes(client: TestClient) -> None:
    answer = alter(client, [user("alice")], producer_byte_rate=1024, request_rate=5)
    assert answer == {
        "quotas": [
            {
                "entity": [user("alice")],
                "values": {"producer_byte_rate": 1024.0, "request_rate": 5.0},
            }
        ]
    }
    alter(client, [user(None), client_id("etl")], consumer_byte_rate=2048)
    h = _basic("alice")
    everything = client.get("/quotas", headers=h).json()["quotas"]
    # Sorted by user then client id, <default> first.
    assert [q["entity"] for q in everything] == [
        [user(None), client_id("etl")],
        [user("alice")],
    ]
    defaults = client.get("/quotas", params={"user": "<default>"}, headers=h).json()
    assert defaults["quotas"][0]["values"] == {"consumer_byte_rate": 2048.0}
    alter(client, [user("alice")], producer_byte_rate=None, request_rate=None)
    assert client.get("/quotas", params={"user": "alice"}, headers=h).json() == {"quotas": []}


@pytest.mark.parametrize(
    "entry",
    [
        {"entity": [], "ops": [{"key": "request_rate", "value": 1}]},
        {"entity": [user("a")], "ops": [{"key": "bogus", "value": 1}]},
        {"entity": [user("a")], "ops": [{"key": "request_rate", "value": 0}]},
        {"entity": [user("a")], "ops": [{"key": "request_rate"}]},
        {"entity": [user("a"), user("b")], "ops": [{"key": "request_rate", "value": 1}]},
        {"entity": [{"entity_type": "topic", "entity_name": "t"}], "ops": []},
    ],
)
def test_bad_alterations_are_refused_whole(client: TestClient, entry: dict[str, Any]) -> None:
    r = client.post("/quotas", json={"entries": [entry]}, headers=_basic("alice"))
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == "INVALID_REQUEST"
    assert client.get("/quotas", headers=_basic("alice")).json() == {"quotas": []}


def _timed(c: TestClient, who: str, cid: str | None = None) -> tuple[float, int]:
    headers = _basic(who)
    params = {"client_id": cid} if cid else {}
    start = time.monotonic()
    r = c.get("/topics", headers=headers, params=params)
    assert r.status_code == 200, r.text
    return time.monotonic() - start, int(r.headers.get(THROTTLE, "0"))


def test_a_users_quota_throttles_that_user_only_and_overrides_the_default(
    client: TestClient,
) -> None:
    r = client.post("/topics", json={"name": "t"}, headers=_basic("alice"))
    assert r.status_code == 201, r.text
    # <default> users: 1 request/s; alice's own quota wins over the default (Kafka's order).
    alter(client, [user(None)], request_rate=1)
    alter(client, [user("alice")], request_rate=1000)
    _timed(client, "bob")
    elapsed, throttle_ms = _timed(client, "bob")
    assert 500 <= throttle_ms <= 1000 + 50
    assert elapsed >= throttle_ms / 1000 - 0.05  # the answer was held back that long
    for _ in range(5):
        assert _timed(client, "alice")[1] == 0
    # A client id of bob's with its own quota under bob's default user: users/<default>/
    # clients/<client-id> is more specific than users/<default>.
    alter(client, [user(None), client_id("batch")], request_rate=1000)
    time.sleep(1.1)  # bob's debt is paid
    for _ in range(3):
        assert _timed(client, "bob", "batch")[1] == 0


def test_produce_bytes_over_quota_are_throttled_with_the_header(client: TestClient) -> None:
    r = client.post("/topics", json={"name": "t"}, headers=_basic("alice"))
    assert r.status_code == 201, r.text
    alter(client, [client_id("slow")], producer_byte_rate=1000)
    h = {**_basic("bob"), "Logbus-Client-Id": "slow"}
    body = {"records": [{"value": "x" * 600}]}  # ~640 bytes: the burst (1000) holds one
    first = client.post("/topics/t/records", json=body, headers=h)
    assert first.status_code == 200 and THROTTLE not in first.headers
    second = client.post("/topics/t/records", json=body, headers=h)
    assert second.status_code == 200, second.text  # delayed, not refused
    assert int(second.headers[THROTTLE]) > 100


def test_websocket_produce_messages_are_delayed_over_quota(client: TestClient) -> None:
    r = client.post("/topics", json={"name": "t"}, headers=_basic("alice"))
    assert r.status_code == 201, r.text
    alter(client, [user("bob")], producer_byte_rate=1000)
    message = {"id": 0, "topic": "t", "records": [{"value": "x" * 600}]}
    with client.websocket_connect("/ws/produce", headers=_basic("bob")) as ws:
        times = []
        for i in range(3):
            start = time.monotonic()
            ws.send_json({**message, "id": i})
            answer = ws.receive_json()
            assert answer["type"] == "ack", answer
            times.append(time.monotonic() - start)
    # The burst (1000 bytes) holds the first message; the next ones wait for the bucket.
    assert times[0] < 0.3
    assert times[1] > 0.15 and times[2] > 0.4, times
