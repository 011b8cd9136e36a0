"""Helpers for the API integration tests (a unique module name: tests dirs are not packages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from app.config import Settings

MAX_REQUEST_BYTES = 256 * 1024


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "num_partitions": 1,
        "max_request_bytes": MAX_REQUEST_BYTES,
        "broker_id": 3,
        "advertised_url": "http://broker-3:8080",
    }
    values.update(overrides)
    return Settings(**values)


def create_topic(client: TestClient, name: str, partitions: int = 1, **configs: Any) -> None:
    body: dict[str, Any] = {"name": name, "partitions": partitions}
    if configs:
        body["configs"] = configs
    r = client.post("/topics", json=body)
    assert r.status_code == 201, r.text


def produce(
    client: TestClient, topic: str, records: list[dict[str, Any]], **body: Any
) -> list[dict[str, int]]:
    r = client.post(f"/topics/{topic}/records", json={"records": records, **body})
    assert r.status_code == 200, r.text
    offsets: list[dict[str, int]] = r.json()["offsets"]
    return offsets


def fetch(client: TestClient, topic: str, partition: int, offset: int, **params: Any) -> Any:
    query = {"offset": offset, "max_wait_ms": 0, **params}
    r = client.get(f"/topics/{topic}/partitions/{partition}/records", params=query)
    assert r.status_code == 200, r.text
    return r.json()


def end_offsets(client: TestClient, topic: str) -> list[tuple[int, int, int]]:
    r = client.get(f"/topics/{topic}")
    assert r.status_code == 200, r.text
    return [
        (p["log_start_offset"], p["high_watermark"], p["log_end_offset"])
        for p in r.json()["partitions"]
    ]
