"""``logbus perf produce|consume|e2e`` against a real broker: sane JSON, nothing lost, caps held.

The tests share one broker (``shared_broker``), each on topics of its own names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    # Types only: which conftest module `conftest` names depends on collection order.
    from conftest import Broker

REPO = Path(__file__).resolve().parents[2]


def perf(broker: Broker, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "perf", *args, "--url", broker.url],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ},
        timeout=timeout,
    )


def perf_json(broker: Broker, *args: str) -> dict[str, Any]:
    done = perf(broker, *args, "--json")
    assert done.returncode == 0, done.stderr
    # --json: one object on stdout, and no progress bar anywhere.
    assert done.stderr == ""
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def assert_latencies(lat: dict[str, float]) -> None:
    assert 0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p999"] <= lat["max"]
    assert 0 < lat["avg"] <= lat["max"]


def test_produce_then_consume_then_e2e(shared_broker: Broker) -> None:
    broker = shared_broker
    produced = perf_json(
        broker, "produce", "--topic", "perf", "--partitions", "3", "--records", "20000"
    )
    assert produced["mode"] == "produce"
    assert produced["records"] == produced["acknowledged"] == 20000
    assert produced["partitions"] == 3
    assert produced["records_per_s"] > 0 and produced["mb_per_s"] > 0
    assert_latencies(produced["latency_ms"])
    # The topic was created with --partitions and holds every record.
    with broker.client() as client:
        parts = client.get("/topics/perf").json()["partitions"]
    assert len(parts) == 3
    assert sum(p["high_watermark"] for p in parts) == 20000

    consumed = perf_json(broker, "consume", "--topic", "perf", "--records", "20000")
    assert consumed["records"] == 20000
    assert consumed["bytes"] == 20000 * 100
    assert consumed["records_per_s"] > 0

    e2e = perf_json(
        broker,
        "e2e",
        "--topic",
        "perf-e2e",
        "--partitions",
        "2",
        "--records",
        "5000",
        "--throughput",
        "5000",
        "--record-size",
        "64",
    )
    assert e2e["sent"] == e2e["received"] == 5000
    assert e2e["lost"] == 0 and e2e["duplicates"] == 0
    assert_latencies(e2e["latency_ms"])
    # Generous: a loaded machine must not fail this, a broken consumer loop would (seconds).
    assert e2e["latency_ms"]["p50"] < 1000


def test_throughput_cap_holds(shared_broker: Broker) -> None:
    broker = shared_broker
    records, rate = 3000, 2000.0  # 1.5 s at the cap
    start = time.monotonic()
    produced = perf_json(
        broker, "produce", "--topic", "capped", "--records", str(records),
        "--throughput", str(rate),
    )  # fmt: skip
    wall = time.monotonic() - start
    assert produced["records"] == records
    assert produced["elapsed_s"] >= records / rate * 0.8
    assert wall >= records / rate * 0.8
    # Paced, not stalled: well under twice the planned time.
    assert produced["records_per_s"] > rate * 0.5


def test_text_summary_and_a_short_topic(shared_broker: Broker) -> None:
    broker = shared_broker
    done = perf(broker, "produce", "--topic", "short", "--records", "100")
    assert done.returncode == 0, done.stderr
    assert "100 records sent" in done.stdout and "p99.9" in done.stdout
    # Fewer records than asked: consume gives up after --timeout-ms and says so.
    done = perf(
        broker, "consume", "--topic", "short", "--records", "200", "--timeout-ms", "500",
        "--json",
    )  # fmt: skip
    assert done.returncode == 1
    assert json.loads(done.stdout)["records"] == 100
    assert "only 100 of 200" in done.stderr


def test_sdk_bench_figures_are_what_the_report_renders(
    shared_broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = shared_broker
    monkeypatch.syspath_prepend(str(REPO))  # bench/ is not an installed package
    from bench import report, sdk

    figures = sdk.run(
        broker.url, runs=1, send_records=20_000, many_records=20_000, e2e_records=2_000
    )
    for key, *_ in report.SDK_RATES:
        assert figures[key] > 0, key
    assert 0 < figures["e2e_p50_ms"] <= figures["e2e_p99_ms"] <= figures["e2e_p999_ms"]
    rendered = report.rows({"sdk": figures})
    labels = [row[0] for row in rendered]
    assert len(labels) == len(report.SDK_RATES) + 1
    assert any("end-to-end latency" in label for label in labels)
