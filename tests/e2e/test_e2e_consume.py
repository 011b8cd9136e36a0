"""``logbus consume --group`` and ``--ws`` against a real broker process.

The WebSocket tests share one broker (``shared_broker``), each with its own topic and
group; the restart test starts its own."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO, Broker, BrokerFactory

FAST_GROUPS = {
    "LOGBUS_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "100",
    "LOGBUS_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
}


def logbus(broker: Broker, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "LOGBUS_URL": broker.url},
        timeout=60,
    )


def test_group_consume_commits_and_offsets_survive_a_restart(new_broker: BrokerFactory) -> None:
    broker = new_broker(FAST_GROUPS).start()
    assert logbus(broker, "topics", "create", "jobs", "--partitions", "2").returncode == 0
    lines = [f"job-{i}" for i in range(10)]
    assert logbus(broker, "produce", "jobs", stdin="\n".join(lines) + "\n").returncode == 0

    first = logbus(broker, "consume", "jobs", "--group", "workers", "--max-records", "6")
    assert first.returncode == 0, first.stderr
    printed = first.stdout.splitlines()
    assert len(printed) == 6 and "Consumed 6 record(s)" in first.stderr

    assert broker.stop() == 0
    broker.start()
    with broker.client() as client:
        committed = client.get("/groups/workers/offsets").json()["offsets"]
    assert sum(o["offset"] for o in committed) == 6

    rest = logbus(broker, "consume", "jobs", "--group", "workers")
    assert rest.returncode == 0, rest.stderr
    # Exactly what was not printed before: the group resumed at its commits.
    assert sorted(printed + rest.stdout.splitlines()) == sorted(lines)
    again = logbus(broker, "consume", "jobs", "--group", "workers")
    assert again.stdout == "" and again.returncode == 0

    bad = logbus(broker, "consume", "jobs", "--group", "workers", "--partition", "0")
    assert bad.returncode == 2


def test_ws_consume(shared_broker: Broker) -> None:
    broker = shared_broker
    assert logbus(broker, "topics", "create", "pushed", "--partitions", "1").returncode == 0
    lines = [f"line {i}" for i in range(5)]
    assert logbus(broker, "produce", "pushed", stdin="\n".join(lines) + "\n").returncode == 0
    r = logbus(broker, "consume", "pushed", "--ws")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == lines
    r = logbus(broker, "consume", "pushed", "--ws", "--from", "2", "--max-records", "2")
    assert r.stdout.splitlines() == lines[2:4]
    assert logbus(broker, "consume", "pushed", "--ws", "--from", "latest").stdout == ""


def test_ws_group_consume_resumes_at_the_commits(shared_broker: Broker) -> None:
    broker = shared_broker
    assert logbus(broker, "topics", "create", "tasks", "--partitions", "2").returncode == 0
    lines = [f"task-{i}" for i in range(8)]
    assert logbus(broker, "produce", "tasks", stdin="\n".join(lines) + "\n").returncode == 0
    first = logbus(broker, "consume", "tasks", "--ws", "--group", "crew", "--max-records", "3")
    assert first.returncode == 0, first.stderr
    assert len(first.stdout.splitlines()) == 3
    rest = logbus(broker, "consume", "tasks", "--ws", "--group", "crew")
    assert rest.returncode == 0, rest.stderr
    assert sorted(first.stdout.splitlines() + rest.stdout.splitlines()) == sorted(lines)
