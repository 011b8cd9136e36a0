"""The ``logbus`` command line against a running broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import REPO, Broker, free_port


def logbus(
    broker: Broker | None, *args: str, stdin: str = "", timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env["LOGBUS_URL"] = broker.url if broker else f"http://127.0.0.1:{free_port()}"
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
    )


def test_topics_lifecycle(broker: Broker) -> None:
    r = logbus(
        broker, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000"
    )
    assert r.returncode == 0, r.stderr
    assert "orders" in r.stdout
    assert logbus(broker, "topics", "create", "audit", "--partitions", "1").returncode == 0

    r = logbus(broker, "topics", "list")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["audit", "orders"]

    r = logbus(broker, "topics", "describe", "orders")
    assert r.returncode == 0, r.stderr
    assert "Partitions: 3" in r.stdout
    assert "retention.ms=60000" in r.stdout
    assert r.stdout.count("Partition: ") == 3

    r = logbus(broker, "topics", "describe", "orders", "--json")
    described = json.loads(r.stdout)
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert described["configs"]["retention.ms"] in (60000, "60000")

    r = logbus(broker, "topics", "create", "orders", "--partitions", "1")
    assert r.returncode == 1
    assert "TOPIC_ALREADY_EXISTS" in r.stderr

    assert logbus(broker, "topics", "delete", "orders").returncode == 0
    r = logbus(broker, "topics", "describe", "orders")
    assert r.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr
    assert logbus(broker, "topics", "list").stdout.split() == ["audit"]


def test_produce_stdin_then_consume_from_earliest(broker: Broker) -> None:
    assert logbus(broker, "topics", "create", "lines", "--partitions", "1").returncode == 0
    lines = [f"line {i} ünïcode" for i in range(2500)]
    r = logbus(broker, "produce", "lines", "--batch-size", "1000", stdin="\n".join(lines) + "\n")
    assert r.returncode == 0, r.stderr
    assert "Produced 2500 record(s)" in r.stderr
    assert "offsets 0-2499" in r.stderr

    r = logbus(broker, "consume", "lines", "--from", "earliest")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == lines

    r = logbus(broker, "consume", "lines", "--from", "2490", "--max-records", "3")
    assert r.stdout.splitlines() == lines[2490:2493]
    assert logbus(broker, "consume", "lines", "--from", "latest").stdout == ""


def test_keys_and_partitions(broker: Broker) -> None:
    assert logbus(broker, "topics", "create", "kv", "--partitions", "4").returncode == 0
    pairs = [f"user{i % 5}\tevent {i}" for i in range(40)]
    r = logbus(broker, "produce", "kv", "--key-separator", "TAB", stdin="\n".join(pairs))
    assert r.returncode == 0, r.stderr

    r = logbus(broker, "consume", "kv", "--print-key")
    assert r.returncode == 0, r.stderr
    got = r.stdout.splitlines()
    assert sorted(got) == sorted(pairs)
    # One key, one partition, in produce order.
    for user in range(5):
        mine = [line for line in got if line.startswith(f"user{user}\t")]
        assert mine == [p for p in pairs if p.startswith(f"user{user}\t")]

    r = logbus(broker, "produce", "kv", "--partition", "2", stdin="only here\n")
    assert "partition 2" in r.stderr
    r = logbus(broker, "consume", "kv", "--partition", "2", "--from", "latest")
    assert r.stdout == ""


def test_follow_waits_for_new_records(broker: Broker) -> None:
    assert logbus(broker, "topics", "create", "live", "--partitions", "2").returncode == 0
    env = {**os.environ, "LOGBUS_URL": broker.url}
    follower = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "consume", "live", "--follow", "--max-records", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=env,
    )
    try:
        time.sleep(1.0)  # the follower is now long-polling both partitions
        assert follower.poll() is None
        r = logbus(broker, "produce", "live", stdin="a\nb\nc\nd\n")
        assert r.returncode == 0, r.stderr
        out, err = follower.communicate(timeout=20)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    assert sorted(out.split()) == ["a", "b", "c", "d"]


def test_errors_are_clear_and_fail(broker: Broker) -> None:
    r = logbus(broker, "consume", "missing")
    assert r.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in r.stderr

    r = logbus(broker, "topics", "create", "bad name!", "--partitions", "1")
    assert r.returncode == 1
    assert "INVALID_TOPIC_EXCEPTION" in r.stderr

    r = logbus(broker, "topics", "create", "cfg", "--config", "retention.ms=soon")
    assert r.returncode == 1
    assert "INVALID_CONFIG" in r.stderr

    logbus(broker, "topics", "create", "small", "--partitions", "1")
    r = logbus(broker, "consume", "small", "--from", "99")
    assert r.returncode == 1
    assert "OFFSET_OUT_OF_RANGE" in r.stderr

    r = logbus(broker, "topics", "create", "x", "--config", "no-equals-sign")
    assert r.returncode == 2

    r = logbus(None, "topics", "list")
    assert r.returncode == 1
    assert "cannot reach the broker" in r.stderr
