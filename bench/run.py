"""`make bench`: every benchmark in one run, with the Redis baseline measured beside it.

Writes bench/RESULTS.md (and bench/results.json with the raw samples) and
bench/chart.png. Each figure is the median of several runs: these machines are
shared and noisy, so compare ratios measured in the same run, not absolutes
across runs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common

HERE = Path(__file__).parent


def _section(name: str, fn: Callable[[], dict[str, Any]], results: dict[str, Any]) -> None:
    print(f"== {name}", flush=True)
    results[name] = fn()
    print(json.dumps(results[name], indent=2, default=str), flush=True)


def collect(quick: bool) -> dict[str, Any]:
    from bench import (
        cluster,
        compaction,
        engine,
        fetch,
        groups,
        http_produce,
        redis_baseline,
        sdk,
        spark,
        ws,
    )

    runs = 1 if quick else 3
    results: dict[str, Any] = {"machine": common.machine()}
    _section("redis", lambda: redis_baseline.run(runs=runs), results)
    common.warm_memory()
    _section("engine", lambda: engine.run(quick=quick), results)
    common.warm_memory()
    with common.broker() as url:
        _section("http_produce", lambda: http_produce.run(url, runs=runs), results)
    _section("fetch", lambda: fetch.run(rounds=runs + 2), results)
    common.warm_memory()
    with common.broker() as url:
        _section("sdk", lambda: sdk.run(url, runs=runs), results)
    _section("compaction", lambda: compaction.run(quick=quick), results)
    # A 1 s heartbeat interval so the rebalance figure is measured in intervals quickly.
    with common.broker({"LOGBUS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "1000"}) as url:
        _section("groups", lambda: groups.run(url), results)
    _section("ws", lambda: ws.run(), results)
    _section("spark", lambda: spark.run(records=1_000_000 if quick else 10_000_000), results)
    # Three brokers, ZooKeeper and a plain broker for the baseline (issue #7).
    common.warm_memory()
    _section("cluster", lambda: cluster.run(runs=runs, quick=quick), results)
    _section("robustness", lambda: _robustness(quick), results)
    _section("http_edge", lambda: _http_edge(quick), results)
    _section("tls", lambda: _tls(quick), results)
    _section("isolation", lambda: _isolation(quick), results)
    _section("copier", lambda: _copier(quick), results)
    _section("sdk_transactions", lambda: _sdk_transactions(quick), results)
    _section("txn_json", lambda: _txn_json(quick), results)
    _section("spark_sink", lambda: _spark_sink(quick), results)
    _section("schemas", lambda: _schemas(quick), results)
    _section("schema_registry", lambda: _schema_registry(quick), results)
    _section("typed_records", lambda: _typed_records(quick), results)
    _section("schema_sdk", lambda: _schema_sdk(quick), results)
    return results


def _tls(quick: bool) -> dict[str, Any]:
    """TLS / plaintext and authenticated + authorized / anonymous ratios of produce and
    fetch (binary and JSON), every broker in this run."""
    from bench import tls

    return tls.run(runs=2 if quick else 7)


def _isolation(quick: bool) -> dict[str, Any]:
    """read_committed vs read_uncommitted consume over one transactional topic, same run."""
    from bench import isolation

    common.warm_memory()
    return isolation.run(runs=1 if quick else 5)


def _copier(quick: bool) -> dict[str, Any]:
    """The exactly-once HTTP copier against a plain copy loop, same broker, same run."""
    from bench import copier

    common.warm_memory()
    return copier.run(rounds=1 if quick else 3)


def _sdk_transactions(quick: bool) -> dict[str, Any]:
    """The SDK's transactional producer (100-ms transactions) against its idempotent one,
    and the SDK copier, same broker, same run."""
    from bench import sdk_transactions

    common.warm_memory()
    return sdk_transactions.run(rounds=1 if quick else 5)


def _txn_json(quick: bool) -> dict[str, Any]:
    """The JSON produce in a transaction against a plain acks=all JSON produce, same run."""
    from bench import transactions

    return transactions.run_json(rounds=1 if quick else 5)


def _spark_sink(quick: bool) -> dict[str, Any]:
    """Spark's exactly-once sink against its at-least-once one, same broker, same run."""
    from bench import spark_sink

    return spark_sink.run(records=100_000 if quick else spark_sink.DEFAULT_RECORDS)


def _schemas(quick: bool) -> dict[str, Any]:
    """Schema-typed record codecs (Avro, JSON Schema, Protobuf with Confluent framing) vs
    orjson on the same records, and jsonschema-rs vs jsonschema; in-process, one core."""
    from bench import schemas

    return schemas.run(n=5_000 if quick else 20_000, rounds=3 if quick else 7)


def _schema_registry(quick: bool) -> dict[str, Any]:
    """Registry look-ups per second (by id, latest; confluent-kafka's client cached and
    not), against GET /healthz on the same connection, same run."""
    from bench import schema_registry

    return schema_registry.run(rounds=1 if quick else 3)


def _typed_records(quick: bool) -> dict[str, Any]:
    """Typed Avro HTTP JSON produce and fetch records/s against untyped JSON, same run."""
    from bench import typed_records

    return typed_records.run(rounds=1 if quick else 3)


def _schema_sdk(quick: bool) -> dict[str, Any]:
    """The SDK's AvroSerializer against confluent-kafka's on the same records, and a
    1,000-record produce to a topic with broker-side schema validation against one without,
    same broker, same run."""
    from bench import schema_sdk

    common.warm_memory()
    return schema_sdk.run(rounds=1 if quick else 5)


def _robustness(quick: bool) -> dict[str, Any]:
    from bench import robustness

    return robustness.run()


def _http_edge(quick: bool) -> dict[str, Any]:
    from bench import http_edge

    return http_edge.run(seconds=5, rounds=1 if quick else 3)


def _http_produce(quick: bool) -> dict[str, Any]:
    """The bulk HTTP produce (1,000-record JSON requests, 1 MiB binary batches) with its own
    Redis baseline measured in the same run (``--only http_produce``)."""
    from bench import http_produce

    return _beside_redis(quick, http_produce.run)


def _fetch(quick: bool) -> dict[str, Any]:
    """The binary fetch, zero-copy against the read-and-send path, fresh brokers, same run."""
    from bench import fetch

    return fetch.run(rounds=(1 if quick else 3) + 2)


def _sdk(quick: bool) -> dict[str, Any]:
    """The SDK section with its own Redis baseline measured in the same run (``--only sdk``)."""
    from bench import sdk

    return _beside_redis(quick, sdk.run)


def _beside_redis(quick: bool, run: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """``run(url, runs=...)`` against a fresh broker, after the Redis baseline of the same
    run, which the result carries as ``redis_baseline`` (a section rerun alone)."""
    from bench import redis_baseline

    runs = 1 if quick else 3
    baseline = redis_baseline.run(runs=runs)
    common.warm_memory()
    with common.broker() as url:
        result = run(url, runs=runs)
    result["redis_baseline"] = baseline
    return result


def _kafka_protocol(quick: bool) -> dict[str, Any]:
    """kio against kafka-python's protocol classes, per request (the Kafka door's choice)."""
    from bench import kafka_protocol

    return kafka_protocol.run(rounds=1 if quick else 5)


def _kafka_door(quick: bool) -> dict[str, Any]:
    """librdkafka through the Kafka door against the SDK through HTTP, same broker, same run."""
    from bench import kafka_door

    result = kafka_door.run(records=100_000 if quick else kafka_door.DEFAULT_RECORDS)
    result.update(kafka_door.run_fetch_and_latency(rounds=1 if quick else 3))
    return result


# Sections that carry their own baseline, so they can be rerun alone (--only).
SECTIONS: dict[str, Callable[[bool], dict[str, Any]]] = {
    "robustness": _robustness,
    "http_edge": _http_edge,
    "sdk": _sdk,
    "http_produce": _http_produce,
    "fetch": _fetch,
    "tls": _tls,
    "isolation": _isolation,
    "copier": _copier,
    "sdk_transactions": _sdk_transactions,
    "txn_json": _txn_json,
    "spark_sink": _spark_sink,
    "schemas": _schemas,
    "kafka_protocol": _kafka_protocol,
    "kafka_door": _kafka_door,
    "schema_registry": _schema_registry,
    "typed_records": _typed_records,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run per figure")
    parser.add_argument(
        "--only",
        help="run just this section (e.g. robustness) and keep the others' figures from "
        "bench/results.json; the section's own baseline is measured in its run",
    )
    args = parser.parse_args()
    if args.only:
        results = json.loads((HERE / "results.json").read_text())
        results[args.only] = SECTIONS[args.only](args.quick)
        results.setdefault("section_dates", {})[args.only] = common.machine()["date"]
    else:
        results = collect(args.quick)
    (HERE / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    from bench.report import write_chart, write_results_md

    write_results_md(results, HERE / "RESULTS.md")
    write_chart(results, HERE / "chart.png")
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
