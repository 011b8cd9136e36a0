"""The README's "Kafka clients" examples run as written against a real broker (the
bootstrap address swapped for the fixture's)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kafka_harness import REPO, KafkaBroker


def section() -> str:
    text = (REPO / "README.md").read_text()
    return text.split("\n## Kafka clients\n", 1)[1].split("\n## ", 1)[0]


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", section(), re.S)


def test_readme_kcat_example_runs(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    if shutil.which("kcat") is None:
        message = "kcat is missing (make test installs Debian's package)"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    (script,) = re.findall(r"```sh\n(.*?)```", section(), re.S)
    done = subprocess.run(
        ["bash", "-e", "-c", script.replace("127.0.0.1:9092", kafka_broker.bootstrap)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["k1=hello@0", "k2=world@1"]


def test_the_readme_has_an_example_per_client() -> None:
    firsts = [code.splitlines()[0] for code in examples()]
    assert firsts == [
        "# confluent-kafka (librdkafka): idempotent, acks=all, any codec; consume with assign",
        "# kafka-python",
        "# aiokafka",
        "# confluent-kafka: a transaction over two topics, read back with read_committed",
        "# Consumer groups: subscribe with a group.id (the client's own assignor, here "
        "cooperative-sticky)",
        "# KIP-848 (librdkafka 2.4+): group.protocol=consumer, the broker assigns the partitions",
    ]


@pytest.mark.parametrize(
    "index",
    range(6),
    ids=["confluent-kafka", "kafka-python", "aiokafka", "transactions", "groups", "kip-848"],
)
def test_readme_kafka_example_runs(kafka_broker: KafkaBroker, index: int, tmp_path: Path) -> None:
    code = examples()[index].replace("127.0.0.1:9092", kafka_broker.bootstrap)
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr
    if index == 0:  # the commit is the group's offset over HTTP
        offsets = httpx.get(f"{kafka_broker.url}/groups/billing/offsets", timeout=30).json()
        assert [(o["topic"], o["offset"]) for o in offsets["offsets"]] == [("orders", 1)]
    if index == 3:  # committed: visible to a read_committed reader over HTTP too
        r = httpx.get(
            f"{kafka_broker.url}/topics/audit/partitions/0/records",
            params={"offset": 0, "value_format": "string", "isolation_level": "read_committed"},
            timeout=30,
        )
        assert [rec["value"] for rec in r.json()["records"]] == ["p-1 paid"]
    if index == 4:  # a classic group, described over HTTP with its commits
        described = httpx.get(f"{kafka_broker.url}/groups/ledger", timeout=30).json()
        assert described["protocol"] == "classic" and described["state"] == "Empty"
        assert sum(o["offset"] for o in described["offsets"]) == 3
        assert done.stdout.count("invoice-") == 3
    if index == 5:  # a KIP-848 group, described over HTTP with its commits
        described = httpx.get(f"{kafka_broker.url}/groups/dispatch", timeout=30).json()
        assert described["protocol"] == "consumer" and described["state"] == "Empty"
        assert sum(o["offset"] for o in described["offsets"]) == 3
        assert done.stdout.count("shipment-") == 3
