"""Damage the disk did after a clean stop is never served: JSON fetches, WebSocket JSON
frames and the SDK consumer deliver the good records before it and then name the damaged
range (CORRUPT_MESSAGE, 503), instead of a 500 or nothing at all.

A start after a clean shutdown trusts its segments (no recovery scan, as Kafka's), so the
damage is found when a decoded read or a consumer's CRC check meets it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
from conftest import Broker, BrokerFactory
from websockets.asyncio.client import connect

from app.client import Consumer, Producer, TopicPartition
from app.common.errors import StoredBatchCorrupt

RECORDS = 1000
PER_BATCH = 10


@pytest.fixture
def damaged(new_broker: BrokerFactory) -> tuple[Broker, int]:
    """A partition of 1,000 records in batches of 10 whose last batch's bytes are damaged
    after a clean stop; returns the broker (started again) and the damaged batch's base."""
    broker = new_broker().start()
    with broker.client() as client:
        assert client.post("/topics", json={"name": "d", "partitions": 1}).status_code == 201
        for start in range(0, RECORDS, PER_BATCH):
            body = {
                "value_format": "string",
                "records": [{"value": f"v{i}"} for i in range(start, start + PER_BATCH)],
            }
            assert client.post("/topics/d/partitions/0/records", json=body).status_code == 200
    assert broker.stop() == 0
    segment = Path(broker.data_dir) / "d-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    for i in range(len(data) - 100, len(data)):
        data[i] ^= 0xFF
    segment.write_bytes(bytes(data))
    broker.start()
    return broker, RECORDS - PER_BATCH


def test_json_fetch_serves_the_good_records_then_names_the_damage(
    damaged: tuple[Broker, int],
) -> None:
    broker, bad = damaged
    seen: list[str] = []
    offset = 0
    with broker.client() as client:
        while True:
            answer = client.get(
                "/topics/d/partitions/0/records",
                params={"offset": offset, "value_format": "string", "max_bytes": 4096},
            )
            if answer.status_code != 200:
                break
            body = answer.json()
            seen += [r["value"] for r in body["records"]]
            assert body["next_offset"] > offset
            offset = body["next_offset"]
        assert answer.status_code == 503, answer.text
        error = answer.json()
        assert error["error_code"] == "CORRUPT_MESSAGE" and error["retriable"] is False
        assert (error["offset"], error["last_offset"]) == (bad, RECORDS - 1)
        assert "d-0" in error["message"] and str(broker.data_dir) not in error["message"]
        # A fetch past the damage is served.
        past = client.get("/topics/d/partitions/0/records", params={"offset": RECORDS})
        assert past.status_code == 200
    assert seen == [f"v{i}" for i in range(bad)]
    assert "damaged batch in d-0" in broker.log()


def test_sdk_consumer_delivers_the_good_records_then_raises_with_the_range(
    damaged: tuple[Broker, int],
) -> None:
    broker, bad = damaged
    values: list[bytes] = []
    with Consumer(broker.url, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("d", 0)])
        with pytest.raises(StoredBatchCorrupt) as raised:
            for _ in range(200):
                values += [r.value for r in consumer.poll(timeout_ms=500)]
    assert values == [f"v{i}".encode() for i in range(bad)]
    assert (raised.value.offset, raised.value.last_offset) == (bad, RECORDS - 1)
    assert raised.value.topic == "d" and raised.value.partition == 0


def test_websocket_json_frames_stop_before_the_damage_and_name_it(
    damaged: tuple[Broker, int],
) -> None:
    broker, bad = damaged

    async def subscribe() -> tuple[list[str], dict[str, object]]:
        url = f"ws://127.0.0.1:{broker.port}/ws/subscribe"
        values: list[str] = []
        async with connect(url, max_size=None) as ws:
            await ws.send(
                orjson.dumps(
                    {
                        "type": "subscribe",
                        "topics": ["d"],
                        "start": "earliest",
                        "format": "json",
                        "value_format": "string",
                        "credit": {"records": 1 << 40},
                    }
                ).decode()
            )
            while True:
                message = orjson.loads(await asyncio.wait_for(ws.recv(), 30))
                if message["type"] == "records":
                    values += [r["value"] for r in message["records"]]
                elif message["type"] == "error":
                    return values, message

    values, error = asyncio.run(subscribe())
    assert values == [f"v{i}" for i in range(bad)]
    assert error["error_code"] == "CORRUPT_MESSAGE"
    assert (error["offset"], error["last_offset"]) == (bad, RECORDS - 1)


def test_a_producer_can_go_on_writing_after_the_damage(damaged: tuple[Broker, int]) -> None:
    broker, _ = damaged
    with Producer(broker.url) as producer:
        metadata = producer.send("d", b"after", partition=0).result(timeout=30)
    assert metadata.offset == RECORDS
