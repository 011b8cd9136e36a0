"""Helpers for the group API tests (a unique module name: tests dirs are not packages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from app.config import Settings

TP = tuple[str, int]


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "broker_id": 1,
        "advertised_url": "http://broker-1:8080",
        # A few partitions keep the first group request (which creates the topic) quick.
        "offsets_topic_num_partitions": 3,
        "group_consumer_heartbeat_interval_ms": 50,
    }
    values.update(overrides)
    return Settings(**values)


def create_topic(client: TestClient, name: str, partitions: int) -> None:
    r = client.post("/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text


def tps(answer: dict[str, Any]) -> list[TP]:
    return sorted(
        (a["topic"], p) for a in answer["assignment"]["partitions"] for p in a["partitions"]
    )


def as_body(parts: list[TP]) -> list[dict[str, Any]]:
    by: dict[str, list[int]] = {}
    for t, p in parts:
        by.setdefault(t, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by.items()]


class Member:
    """A stateless HTTP consumer: joins, heartbeats with what it owns, leaves."""

    def __init__(self, client: TestClient, group: str, **join: Any) -> None:
        self.client = client
        self.group = group
        self.join = join
        self.member_id = ""
        self.epoch = 0
        self.owned: list[TP] = []

    def heartbeat(self, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"member_id": self.member_id, "member_epoch": self.epoch}
        if self.epoch == 0:
            body.update(self.join)
        else:
            body["owned_partitions"] = as_body(self.owned)
        body.update(extra)
        r = self.client.post(f"/groups/{self.group}/heartbeat", json=body)
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        self.member_id = answer["member_id"]
        self.epoch = answer["member_epoch"]
        self.owned = tps(answer)
        return answer

    def leave(self) -> None:
        self.heartbeat(member_epoch=-1)

    def commit(self, offsets: dict[TP, int]) -> Any:
        return self.client.post(
            f"/groups/{self.group}/offsets",
            json={
                "member_id": self.member_id,
                "member_epoch": self.epoch,
                "offsets": [
                    {"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()
                ],
            },
        )


def held(client: TestClient, group: str) -> dict[str, list[TP]]:
    """Per member: assigned plus pending revocation (everything it may still be reading)."""
    desc = client.get(f"/groups/{group}").json()
    out: dict[str, list[TP]] = {}
    for m in desc["members"]:
        parts = [
            (a["topic"], p)
            for key in ("assignment", "pending_revocation")
            for a in m[key]
            for p in a["partitions"]
        ]
        out[m["member_id"]] = sorted(parts)
    return out


def assert_disjoint(client: TestClient, group: str) -> None:
    seen: set[TP] = set()
    for parts in held(client, group).values():
        assert not seen & set(parts), f"{seen & set(parts)} held twice"
        seen |= set(parts)
