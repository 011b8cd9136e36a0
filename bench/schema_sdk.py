"""The SDK's Avro serializer against confluent-kafka's, and the cost of broker-side schema
validation, same broker, same run (issue 18).

``python -m bench.schema_sdk`` (also ``make bench``'s ``schema_sdk`` section;
hand-recorded below the marker of bench/RESULTS.md):

- serializer: ``app.client.serialization.AvroSerializer`` and confluent-kafka's
  ``AvroSerializer``, both on this broker's registry (``/schema-registry``), each calls
  itself ``N`` times on the same records (the schema id cached after the first call:
  what is measured is the encoding and framing); records/s, median of ``rounds``,
  alternating the two. Both write the same bytes (checked).
- validation: 1,000 framed records per request, ``POST .../batches`` (RecordBatch v2, the
  path Kafka clients' produce shares) and ``POST .../records`` (JSON, base64 values), to
  a topic with ``confluent.value.schema.validation=true`` and to one without; the median
  request latency of each, alternating, and their ratio.
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import time
from typing import Any

import httpx
import orjson

from bench.common import broker, machine

N = 20_000
PER_REQUEST = 1_000
REQUESTS = 60
SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "qty", "type": "int"},
            {"name": "price", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
        ],
    }
)


def _values(n: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "item": f"item-{i % 97}", "qty": i % 7, "price": 9.5, "tags": ["a", "b"]}
        for i in range(n)
    ]


def _rate(serialize: Any, values: list[dict[str, Any]], ctx: Any) -> float:
    start = time.perf_counter()
    for v in values:
        serialize(v, ctx)
    return len(values) / (time.perf_counter() - start)


def serializers(url: str, rounds: int) -> dict[str, Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient as CkRegistry
    from confluent_kafka.schema_registry.avro import AvroSerializer as CkAvro
    from confluent_kafka.serialization import MessageField, SerializationContext

    from app.client.schema_registry import SchemaRegistryClient
    from app.client.serialization import AvroSerializer
    from app.client.serialization import SerializationContext as Ctx

    values = _values(N)
    registry = SchemaRegistryClient(f"{url}/schema-registry")
    ours = AvroSerializer(registry, SCHEMA)
    theirs = CkAvro(CkRegistry({"url": f"{url}/schema-registry"}), SCHEMA)
    our_ctx = Ctx("bench-sdk", "value")
    ck_ctx = SerializationContext("bench-sdk", MessageField.VALUE)
    assert ours(values[1], our_ctx) == theirs(values[1], ck_ctx)  # same bytes, warm caches
    ours_rates, ck_rates = [], []
    for _ in range(rounds):
        ours_rates.append(_rate(ours, values, our_ctx))
        ck_rates.append(_rate(theirs, values, ck_ctx))
    registry.close()
    o, c = statistics.median(ours_rates), statistics.median(ck_rates)
    return {
        "records": N,
        "logbus_records_per_s": round(o),
        "confluent_kafka_records_per_s": round(c),
        "ratio": round(o / c, 3),
    }


def _latency(c: httpx.Client, path: str, **kwargs: Any) -> float:
    start = time.perf_counter()
    r = c.post(path, **kwargs)
    elapsed = time.perf_counter() - start
    assert r.status_code == 200, r.text
    return elapsed * 1000


def validation(url: str, requests: int) -> dict[str, Any]:
    from app.common.batch import build_batch

    with httpx.Client(base_url=url, timeout=60) as c:
        for name, configs in (
            ("bench-validated", {"confluent.value.schema.validation": "true"}),
            ("bench-plain", {}),
        ):
            r = c.post("/topics", json={"name": name, "partitions": 1, "configs": configs})
            assert r.status_code == 201, r.text
        r = c.post(
            "/schema-registry/subjects/bench-validated-value/versions", json={"schema": SCHEMA}
        )
        schema_id = int(r.json()["id"])
        payload = orjson.dumps({"id": 1, "item": "x"})  # the broker checks the header only
        framed = [
            b"\x00" + schema_id.to_bytes(4, "big") + payload + bytes([i % 251])
            for i in range(PER_REQUEST)
        ]
        batch = build_batch([(None, v) for v in framed])
        body = orjson.dumps(
            {
                "value_format": "binary",
                "records": [{"value": base64.b64encode(v).decode()} for v in framed],
            }
        )
        binary: dict[str, list[float]] = {"bench-validated": [], "bench-plain": []}
        json_: dict[str, list[float]] = {"bench-validated": [], "bench-plain": []}
        headers_bin = {"content-type": "application/octet-stream"}
        headers_json = {"content-type": "application/json"}
        for i in range(requests + 5):
            for topic in ("bench-validated", "bench-plain"):
                b = _latency(
                    c, f"/topics/{topic}/partitions/0/batches", content=batch, headers=headers_bin
                )
                j = _latency(c, f"/topics/{topic}/records", content=body, headers=headers_json)
                if i >= 5:  # warm-up requests not counted
                    binary[topic].append(b)
                    json_[topic].append(j)

    def summary(samples: dict[str, list[float]]) -> dict[str, float]:
        v, p = (
            statistics.median(samples["bench-validated"]),
            statistics.median(samples["bench-plain"]),
        )
        return {"validated_ms": round(v, 3), "plain_ms": round(p, 3), "ratio": round(v / p, 3)}

    return {
        "records_per_request": PER_REQUEST,
        "requests": requests,
        "binary_batches": summary(binary),
        "json_records": summary(json_),
    }


def run(rounds: int = 3) -> dict[str, Any]:
    with broker() as url:
        return {
            "machine": machine(),
            "serializer": serializers(url, rounds),
            "validation": validation(url, REQUESTS if rounds > 1 else 20),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(run(args.rounds), indent=2))


if __name__ == "__main__":
    main()
