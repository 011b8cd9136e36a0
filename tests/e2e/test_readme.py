"""The README's curl walk-through, run as written against a real broker.

The block between the ``readme-test`` markers is executed with bash after
pointing ``localhost:8080`` at the test broker; each command's output is then
checked against what the README's comments promise.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from cluster import Cluster
from conftest import REPO, Broker, BrokerFactory

README = REPO / "README.md"
# Under CI a missing curl is a failure (the test then fails in run()), never a silent skip.
NEEDS_CURL = pytest.mark.skipif(
    shutil.which("curl") is None and os.environ.get("CI") != "true",
    reason="curl is not installed",
)


def readme_block(name: str, language: str) -> str:
    text = README.read_text()
    start, end = f"<!-- readme-test:{name}:start -->", f"<!-- readme-test:{name}:end -->"
    assert start in text and end in text, f"the README's {name} block is missing"
    block = text.split(start, 1)[1].split(end, 1)[0]
    code = re.search(rf"```{language}\n(.*?)```", block, re.S)
    assert code, f"the README's {name} block has no {language} code"
    return code.group(1)


def readme_commands(name: str = "walkthrough") -> list[str]:
    commands: list[str] = []
    current = ""
    for line in readme_block(name, "bash").splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line + "\n"
        if not line.endswith("\\") and current.count("'") % 2 == 0:
            commands.append(current)
            current = ""
    return commands


def run(command: str, broker: Broker, cwd: Path) -> str:
    command = command.replace("localhost:8080", f"127.0.0.1:{broker.port}")
    command = command.replace("/tmp/clicks-0.bin", str(cwd / "clicks-0.bin"))
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@NEEDS_CURL
def test_readme_curl_walkthrough(broker: Broker, tmp_path: Path) -> None:
    outputs = [
        orjson.loads(out) if out.startswith("{") else out
        for out in (run(c, broker, tmp_path) for c in readme_commands())
    ]
    created, keyed, plain, fetched, raw_head, earliest, latest, described = outputs

    assert created["name"] == "clicks" and len(created["partitions"]) == 3
    assert created["config_overrides"] == {"retention.ms": 86400000} or created[
        "config_overrides"
    ] == {"retention.ms": "86400000"}

    # murmur2("carol") % 3 == 2, as in Kafka; both records land there in order.
    assert [(o["partition"], o["offset"]) for o in keyed["offsets"]] == [(2, 0), (2, 1)]
    assert [(o["partition"], o["offset"]) for o in plain["offsets"]] == [(0, 0), (0, 1)]

    assert fetched["high_watermark"] == 2 and fetched["next_offset"] == 2
    assert [(r["offset"], r["value"]) for r in fetched["records"]] == [(0, "hello"), (1, "world")]

    assert "logbus-high-watermark: 2" in raw_head.lower()
    raw = (tmp_path / "clicks-0.bin").read_bytes()
    assert b"hello" in raw and b"world" in raw

    assert earliest["offset"] == 0 and latest["offset"] == 2
    assert [p["high_watermark"] for p in described["partitions"]] == [2, 0, 2]
    assert described["configs"]["retention.ms"] == 86400000


def test_readme_states_the_two_commands() -> None:
    text = README.read_text()
    assert "make run" in text and "make test" in text


@NEEDS_CURL
def test_readme_error_example(broker: Broker, tmp_path: Path) -> None:
    """The README's error example is the broker's exact answer."""
    for command in readme_commands()[:3]:
        run(command, broker, tmp_path)
    text = README.read_text()
    example = re.search(r"```console\n\$ (curl [^\n]+)\n(\{[^\n]+\})\n```", text)
    assert example, "the README's error example is missing"
    assert orjson.loads(run(example.group(1), broker, tmp_path)) == orjson.loads(example.group(2))


@NEEDS_CURL
def test_readme_group_walkthrough(broker: Broker, tmp_path: Path) -> None:
    for command in readme_commands()[:3]:
        run(command, broker, tmp_path)
    joined, beat, committed, fetched, described, left = (
        orjson.loads(run(c, broker, tmp_path)) for c in readme_commands("groups")
    )
    assert joined["member_id"] == "consumer-1" and joined["member_epoch"] == 1
    assert joined["assignment"]["partitions"] == [{"topic": "clicks", "partitions": [0, 1, 2]}]
    assert beat["member_epoch"] == 1 and beat["assignment"] == joined["assignment"]
    assert [(o["partition"], o["offset"]) for o in committed["offsets"]] == [(0, 2)]
    assert {o["partition"]: o["offset"] for o in fetched["offsets"]} == {0: 2, 1: -1, 2: -1}
    assert [m["member_id"] for m in described["members"]] == ["consumer-1"]
    assert [(o["partition"], o["lag"]) for o in described["offsets"]] == [(0, 0)]
    assert left["member_epoch"] == -1
    after = orjson.loads(run("curl -s localhost:8080/groups/billing", broker, tmp_path))
    assert after["members"] == []


def test_readme_sdk_example(broker: Broker) -> None:
    code = readme_block("sdk", "python").replace("http://127.0.0.1:8080", broker.url)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("RecordMetadata(topic='orders'")
    printed = [line.split(" ", 3) for line in lines[1:]]
    assert len(printed) >= 4
    assert lines[-2:] == ["assigned [0, 1, 2]", "billed 4"]
    printed = [p for p in printed if p[0] not in ("assigned", "billed")]
    assert sorted(value for *_, value in printed) == sorted(
        ["b'{\"total\": 42}'", "b'a'", "b'b'", "b'c'"]
    )


def test_readme_sdk_transactions_example(broker: Broker) -> None:
    """The consume-transform-produce loop: each input doubled in the output exactly once
    (read_committed), and the group's committed offsets at the end of the input."""
    code = readme_block("sdk-transactions", "python").replace("http://127.0.0.1:8080", broker.url)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "copied 10"
    values = []
    with broker.client() as c:
        for p in (0, 1):
            r = c.get(
                f"/topics/amounts-doubled/partitions/{p}/records",
                params={"offset": 0, "isolation_level": "read_committed", "value_format": "string"},
            )
            assert r.status_code == 200, r.text
            values += [int(rec["value"]) for rec in r.json()["records"]]
        assert sorted(values) == [2 * i for i in range(10)]
        offsets = c.get("/groups/doubler/offsets", params={"topic": "amounts"}).json()["offsets"]
        ends = [
            c.get(f"/topics/amounts/partitions/{p}/offsets", params={"at": "latest"}).json()[
                "offset"
            ]
            for p in (0, 1)
        ]
    assert sorted((o["partition"], o["offset"]) for o in offsets) == [(0, ends[0]), (1, ends[1])]


def test_readme_websocket_example(broker: Broker, tmp_path: Path) -> None:
    for command in readme_commands()[:3]:
        run(command, broker, tmp_path)
    code = readme_block("websocket", "python").replace("127.0.0.1:8080", f"127.0.0.1:{broker.port}")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "subscribed"
    assert "'type': 'ack'" in lines[1] and "'offset': 2" in lines[1]
    # Partition 0 holds hello, world (from the walk-through) and then the pushed record.
    pushed = [line for line in lines[2:] if line.startswith("0 ")]
    assert pushed and "pushed" in pushed[-1]
    assert "'hello', 'world'" in pushed[0]


@NEEDS_CURL
def test_readme_cluster_walkthrough(cluster: Cluster) -> None:
    """The "Running a cluster" commands, with localhost:808N pointed at broker N."""
    outputs = []
    for command in readme_commands("cluster"):
        for broker_id in cluster.ids:
            command = command.replace(
                f"localhost:808{broker_id}", f"127.0.0.1:{cluster.broker(broker_id).port}"
            )
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outputs.append(orjson.loads(done.stdout))
    created, produced, metadata = outputs
    assert created["name"] == "orders" and len(created["partitions"]) == 3
    for p in created["partitions"]:
        assert sorted(p["replicas"]) == [1, 2, 3] and p["leader"] == p["replicas"][0]
        assert sorted(p["isr"]) == [1, 2, 3]
    assert created["configs"]["min.insync.replicas"] == 2
    assert produced["offsets"][0]["partition"] == 0 and produced["offsets"][0]["offset"] == 0
    assert sorted(b["id"] for b in metadata["brokers"]) == [1, 2, 3]
    assert metadata["controller"] in (1, 2, 3)
    assert metadata["topics"][0]["name"] == "orders"


SECURED_ENV = {
    "LOGBUS_AUTHENTICATION": "basic",
    "LOGBUS_AUTHORIZER": "acl",
    "LOGBUS_SUPER_USERS": "User:admin",
}


@NEEDS_CURL
def test_readme_security_walkthrough(new_broker: BrokerFactory, tmp_path: Path) -> None:
    """The Security section's commands against a broker started as it says, then its SDK
    and WebSocket example."""
    text = README.read_text()
    for name, value in SECURED_ENV.items():
        assert f"{name}={value.replace('User:admin', chr(39) + 'User:admin' + chr(39))}" in text
    broker = new_broker(SECURED_ENV)
    cli = f"{sys.executable} -m app.cli"
    commands = [
        c.replace("./data", str(broker.data_dir)).replace("logbus ", cli + " ")
        for c in readme_commands("security")
    ]
    for command in commands[:2]:  # users, before the broker starts
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0, done.stderr
    broker.start()
    outputs = [run(c, broker, tmp_path) for c in commands[2:]]
    anonymous, created, acl, produced, refused = outputs
    assert orjson.loads(anonymous)["error_code"] == "SASL_AUTHENTICATION_FAILED"
    assert orjson.loads(created)["name"] == "payments"
    assert '"operation": "WRITE"' in acl and "User:alice" in acl
    assert orjson.loads(produced)["offsets"][0]["offset"] == 0
    denial = orjson.loads(refused)
    assert denial["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
    assert (denial["operation"], denial["resource_name"]) == ("READ", "payments")

    code = readme_block("security-sdk", "python").replace("http://127.0.0.1:8080", broker.url)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[b'{\"amount\":5}', b'paid']", lines
    assert lines[1].startswith("pushed")
    assert lines[2] == "TOPIC_AUTHORIZATION_FAILED DELETE"
    assert "admin-secret-1" not in broker.log() and "alice-secret-1" not in broker.log()


@NEEDS_CURL
def test_readme_transactions_walkthrough(new_broker: BrokerFactory, tmp_path: Path) -> None:
    broker = new_broker().start()  # a fresh data dir: the first producer id is 0
    out = [orjson.loads(run(c, broker, tmp_path)) for c in readme_commands("transactions")]
    _, _, init, produced, txn_offsets, described, committed, fetched, listed = out
    assert init == {"producer_id": 0, "producer_epoch": 0}
    assert len(produced["offsets"]) == 2
    assert {o["partition"] for o in produced["offsets"]} <= {0, 1}
    assert txn_offsets["group_id"] == "copier"
    assert described["transaction_state"] == "Ongoing"
    assert {t["topic"] for t in described["topics"]} == {"__consumer_offsets", "orders"}
    assert committed == {"transactional_id": "orders-copier", "transaction_state": "CompleteCommit"}
    assert fetched["offsets"][0]["offset"] == 42
    assert listed["transaction_states"] == [
        {
            "transactional_id": "orders-copier",
            "producer_id": 0,
            "transaction_state": "CompleteCommit",
        }
    ]


@NEEDS_CURL
def test_readme_schema_registry_walkthrough(broker: Broker, tmp_path: Path) -> None:
    registered, latest, by_id, refused, level, evolved = (
        orjson.loads(run(c, broker, tmp_path)) for c in readme_commands("schema-registry")
    )
    assert (registered["subject"], registered["version"], registered["id"]) == (
        "clicks-value",
        1,
        1,
    )
    assert latest["version"] == 1 and latest["id"] == 1
    assert orjson.loads(by_id["schema"])["name"] == "Click"
    assert refused["error_code"] == 40901
    assert refused["message"].startswith("Schema being registered is incompatible with")
    assert level == {"compatibility": "NONE"}
    assert (evolved["version"], evolved["id"]) == (2, 2)


def test_readme_schema_registry_sdk_example(broker: Broker) -> None:
    code = readme_block("schema-registry-sdk", "python").replace(
        "http://127.0.0.1:8080", broker.url
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["1", "True", "{'total': 42}"]


@NEEDS_CURL
def test_readme_typed_records(broker: Broker, tmp_path: Path) -> None:
    registered, produced, refused, fetched = (
        orjson.loads(run(c, broker, tmp_path)) for c in readme_commands("typed-records")
    )
    assert registered["subject"] == "orders-value"
    assert [o["offset"] for o in produced["offsets"]] == [0]
    assert refused["error_code"] == "INVALID_RECORD"
    assert (refused["index"], refused["field"], refused["path"]) == (1, "value", "total")
    assert refused["message"].startswith("body.records.1.value: record does not match")
    assert [r["value"] for r in fetched["records"]] == [{"total": 42}]


@NEEDS_CURL
def test_readme_schema_sdk_and_validation(broker: Broker, tmp_path: Path) -> None:
    code = readme_block("schema-sdk", "python").replace("http://127.0.0.1:8080", broker.url)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["0", "1", "{'cents': 1250}"]
    created, refused = (
        orjson.loads(run(c, broker, tmp_path)) for c in readme_commands("schema-validation")
    )
    assert created["name"] == "checked"
    assert (refused["error_code"], refused["index"], refused["field"]) == (
        "INVALID_RECORD",
        0,
        "value",
    )
    assert "wire format" in refused["message"]
