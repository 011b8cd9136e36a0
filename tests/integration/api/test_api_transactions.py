"""Transactions through the HTTP API, the app in process over real logs (#16).

Reads use the core's ``Log.read(..., isolation=READ_COMMITTED)`` and the aborted
transactions it reports, as a read_committed fetch does, so what a committed reader
sees is checked against the partition itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from api_helpers import create_topic, make_settings
from log_helpers import committed_values
from starlette.testclient import TestClient

from app.api import create_app
from app.common.batch import build_batch
from app.config import Settings
from app.core.log.log import Log


def _log(client: TestClient, topic: str, partition: int = 0) -> Log:
    log: Log = client.app.state.logbus.manager.get_log(topic, partition)  # type: ignore[attr-defined]
    return log


def committed(client: TestClient, topic: str, partition: int = 0) -> list[str]:
    """The values a read_committed reader gets: up to the LSO, aborted records dropped."""
    return committed_values(_log(client, topic, partition))


def init(client: TestClient, tid: str, **body: Any) -> tuple[int, int]:
    r = client.post("/producers", json={"transactional_id": tid, **body})
    assert r.status_code == 200, r.text
    return r.json()["producer_id"], r.json()["producer_epoch"]


def produce(
    client: TestClient, tid: str, pid: int, epoch: int, topic: str, values: list[str]
) -> Any:
    return client.post(
        f"/transactions/{tid}/topics/{topic}/records",
        params={"producer_id": pid, "producer_epoch": epoch},
        json={"value_format": "string", "records": [{"value": v, "partition": 0} for v in values]},
    )


def txn_post(client: TestClient, tid: str, what: str, pid: int, epoch: int, **body: Any) -> Any:
    """``POST /transactions/{tid}/{what}`` as producer ``pid`` at ``epoch``."""
    return client.post(
        f"/transactions/{tid}/{what}", json={"producer_id": pid, "producer_epoch": epoch, **body}
    )


def end(client: TestClient, tid: str, pid: int, epoch: int, commit: bool = True) -> Any:
    return txn_post(client, tid, "commit" if commit else "abort", pid, epoch)


def add_partitions(client: TestClient, tid: str, pid: int, epoch: int, topic: str) -> Any:
    """AddPartitionsToTxn of ``topic``'s partition 0."""
    return txn_post(
        client, tid, "partitions", pid, epoch, topics=[{"topic": topic, "partitions": [0]}]
    )


def commit_offset(client: TestClient, tid: str, pid: int, epoch: int, offset: int) -> Any:
    """TxnOffsetCommit of group ``g``'s offset on ``in``-0."""
    offsets = [{"topic": "in", "partition": 0, "offset": offset}]
    return txn_post(client, tid, "offsets", pid, epoch, group_id="g", offsets=offsets)


def send_batch(
    client: TestClient, pid: int, epoch: int, seq: int, value: bytes, partition: int = 0
) -> Any:
    """A transactional batch of one record, binary-produced to ``out``."""
    batch = build_batch(
        [(None, value)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )
    return client.post(
        f"/topics/out/partitions/{partition}/batches",
        content=batch,
        headers={"content-type": "application/octet-stream"},
    )


@pytest.fixture
def client(settings: Settings) -> Any:
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_commit_shows_abort_hides_and_an_open_transaction_holds_the_lso(
    client: TestClient,
) -> None:
    create_topic(client, "out")
    pid, epoch = init(client, "copier")
    assert epoch == 0
    r = produce(client, "copier", pid, epoch, "out", ["a", "b"])
    assert r.status_code == 200, r.text
    assert [o["offset"] for o in r.json()["offsets"]] == [0, 1]
    d = client.get("/transactions/copier").json()
    assert d["transaction_state"] == "Ongoing"
    assert d["topics"] == [{"topic": "out", "partitions": [0]}]
    # Open: the LSO holds at the transaction's first offset; nothing is committed yet.
    assert _log(client, "out").last_stable_offset == 0
    assert committed(client, "out") == []
    r = end(client, "copier", pid, epoch)
    assert r.status_code == 200 and r.json()["transaction_state"] == "CompleteCommit", r.text
    assert committed(client, "out") == ["a", "b"]
    # A retried commit answers the same.
    assert end(client, "copier", pid, epoch).json()["transaction_state"] == "CompleteCommit"
    # The next transaction, aborted: its records never reach a committed reader.
    assert produce(client, "copier", pid, epoch, "out", ["x"]).status_code == 200
    r = end(client, "copier", pid, epoch, commit=False)
    assert r.json()["transaction_state"] == "CompleteAbort", r.text
    assert produce(client, "copier", pid, epoch, "out", ["c"]).status_code == 200
    assert end(client, "copier", pid, epoch).status_code == 200
    assert committed(client, "out") == ["a", "b", "c"]
    assert _log(client, "out").last_stable_offset == _log(client, "out").log_end_offset


def test_a_second_init_fences_the_zombie_and_aborts_its_transaction(client: TestClient) -> None:
    create_topic(client, "out")
    pid, old = init(client, "job")
    assert produce(client, "job", pid, old, "out", ["zombie"]).status_code == 200
    pid2, new = init(client, "job")
    assert pid2 == pid and new == old + 2  # the fencing abort took old + 1
    for r in (
        produce(client, "job", pid, old, "out", ["late"]),
        end(client, "job", pid, old),
        add_partitions(client, "job", pid, old, "out"),
    ):
        assert r.status_code == 409 and r.json()["error_code"] == "PRODUCER_FENCED", r.text
    # The zombie's own binary batch at its old epoch: the partition refuses it too.
    r = send_batch(client, pid, old, 1, b"late")
    assert r.status_code == 409 and r.json()["error_code"] == "PRODUCER_FENCED", r.text
    assert committed(client, "out") == []
    assert produce(client, "job", pid, new, "out", ["fresh"]).status_code == 200
    assert end(client, "job", pid, new).status_code == 200
    assert committed(client, "out") == ["fresh"]


def test_binary_transactional_produce_needs_the_partition_added(client: TestClient) -> None:
    create_topic(client, "out", partitions=2)
    pid, epoch = init(client, "bin")

    def send(seq: int, partition: int = 0) -> Any:
        return send_batch(client, pid, epoch, seq, b"v", partition)

    r = send(0)
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_TXN_STATE", r.text
    r = add_partitions(client, "bin", pid, epoch, "out")
    assert r.status_code == 200 and r.json()["transaction_state"] == "Ongoing", r.text
    assert send(0).status_code == 200
    r = send(0, partition=1)  # not added
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_TXN_STATE"
    assert end(client, "bin", pid, epoch).status_code == 200
    assert committed(client, "out") == ["v"]


def test_offsets_committed_in_a_transaction_count_only_when_it_commits(
    client: TestClient,
) -> None:
    create_topic(client, "in")
    create_topic(client, "out")
    pid, epoch = init(client, "cp")

    def commit(offset: int) -> None:
        r = commit_offset(client, "cp", pid, epoch, offset)
        assert r.status_code == 200, r.text

    def fetched() -> int:
        r = client.get("/groups/g/offsets", params={"topic": "in"})
        assert r.status_code == 200, r.text
        return int(r.json()["offsets"][0]["offset"])

    assert produce(client, "cp", pid, epoch, "out", ["1"]).status_code == 200
    commit(5)
    assert fetched() == -1
    assert end(client, "cp", pid, epoch, commit=False).status_code == 200
    assert fetched() == -1
    assert produce(client, "cp", pid, epoch, "out", ["2"]).status_code == 200
    commit(7)
    assert fetched() == -1
    assert end(client, "cp", pid, epoch).status_code == 200
    assert fetched() == 7
    assert committed(client, "out") == ["2"]


def test_offsets_of_transactions_survive_a_restart_as_decided(settings: Settings) -> None:
    with TestClient(create_app(settings)) as c:
        create_topic(c, "in")
        pid, epoch = init(c, "cp")
        for offset, commit in ((3, True), (9, False)):
            r = commit_offset(c, "cp", pid, epoch, offset)
            assert r.status_code == 200, r.text
            assert end(c, "cp", pid, epoch, commit).status_code == 200
        r = commit_offset(c, "cp", pid, epoch, 11)
        assert r.status_code == 200  # left open at the stop
    with TestClient(create_app(settings)) as c:
        r = c.get("/groups/g/offsets", params={"topic": "in"})
        assert r.json()["offsets"][0]["offset"] == 3, r.text
        d = c.get("/transactions/cp").json()
        assert d["transaction_state"] == "Ongoing" and d["producer_epoch"] == epoch


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    tmp_path: Path,
) -> None:
    settings = make_settings(
        tmp_path, transaction_abort_timed_out_transaction_cleanup_interval_ms=50
    )
    with TestClient(create_app(settings)) as c:
        create_topic(c, "out")
        pid, epoch = init(c, "slow", transaction_timeout_ms=100)
        assert produce(c, "slow", pid, epoch, "out", ["late"]).status_code == 200
        import time

        deadline = time.monotonic() + 10
        while c.get("/transactions/slow").json()["transaction_state"] != "CompleteAbort":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _log(c, "out").last_stable_offset == _log(c, "out").log_end_offset
        assert committed(c, "out") == []
        r = end(c, "slow", pid, epoch)
        assert r.status_code == 409 and r.json()["error_code"] == "PRODUCER_FENCED"


def test_describe_list_and_errors(client: TestClient) -> None:
    create_topic(client, "out")
    r = client.get("/transactions/nope")
    assert r.status_code == 404 and r.json()["error_code"] == "TRANSACTIONAL_ID_NOT_FOUND"
    pid, epoch = init(client, "a")
    init(client, "b")
    assert produce(client, "a", pid, epoch, "out", ["v"]).status_code == 200
    listed = client.get("/transactions").json()
    assert {
        t["transactional_id"]: t["transaction_state"] for t in listed["transaction_states"]
    } == {"a": "Ongoing", "b": "Empty"}
    r = client.get("/transactions", params={"state": ["Ongoing", "Bogus"]}).json()
    assert [t["transactional_id"] for t in r["transaction_states"]] == ["a"]
    assert r["unknown_state_filters"] == ["Bogus"]
    # Nothing to commit, a wrong producer id, an epoch never handed out, internal topics.
    pid_b, epoch_b = init(client, "c")
    r = end(client, "c", pid_b, epoch_b)
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_TXN_STATE"
    r = end(client, "a", pid + 1000, epoch)
    assert r.status_code == 409 and r.json()["error_code"] == "INVALID_PRODUCER_ID_MAPPING"
    r = end(client, "a", pid, epoch + 5)
    assert r.status_code == 409 and r.json()["error_code"] == "INVALID_PRODUCER_EPOCH"
    r = add_partitions(client, "a", pid, epoch, "__consumer_offsets")
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_TOPIC_EXCEPTION"
    r = add_partitions(client, "a", pid, epoch, "missing")
    assert r.status_code == 404 and r.json()["error_code"] == "UNKNOWN_TOPIC_OR_PARTITION"
    r = client.post("/topics/__transaction_state/records", json={"records": [{"value": "x"}]})
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_TOPIC_EXCEPTION"


def test_markers_from_outside_the_cluster_are_refused(client: TestClient) -> None:
    create_topic(client, "out")
    body = {"producer_id": 5, "producer_epoch": 0, "commit": True, "coordinator_epoch": 0}
    for headers in ({}, {"Logbus-Replica-Id": "3", "Logbus-Replica-Auth": "00"}):
        r = client.post("/topics/out/partitions/0/markers", json=body, headers=headers)
        assert r.status_code == 403, r.text
        assert r.json()["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert _log(client, "out").log_end_offset == 0


def test_a_read_committed_groups_lag_and_reset_to_latest_count_to_the_lso(
    client: TestClient,
) -> None:
    """A transaction open on the input: a read_committed group at the LSO has no lag (it
    can read no further), and reset to latest puts it at the LSO, not past the open
    records (they may still commit); read_uncommitted keeps the high watermark."""
    create_topic(client, "in")
    r = client.post("/topics/in/records", json={"records": [{"value": 1}, {"value": 2}]})
    assert r.status_code == 200, r.text
    pid, epoch = init(client, "writer")
    assert produce(client, "writer", pid, epoch, "in", ["open1", "open2"]).status_code == 200
    assert (_log(client, "in").last_stable_offset, _log(client, "in").high_watermark) == (2, 4)

    def reset(isolation: str) -> int:
        r = client.post(
            "/groups/g/offsets/reset",
            json={"topic": "in", "to": "latest", "isolation_level": isolation},
        )
        assert r.status_code == 200, r.text
        return int(r.json()["offsets"][0]["offset"])

    def lag(isolation: str) -> tuple[int, int]:
        r = client.get("/groups/g", params={"isolation_level": isolation})
        assert r.status_code == 200, r.text
        o = r.json()["offsets"][0]
        assert (o["high_watermark"], o["last_stable_offset"]) == (4, 2)
        return o["offset"], o["lag"]

    assert reset("read_committed") == 2
    assert lag("read_committed") == (2, 0)
    assert lag("read_uncommitted") == (2, 2)
    assert reset("read_uncommitted") == 4
    assert lag("read_committed") == (4, 0)  # past the LSO: nothing to read yet
    # The default is read_uncommitted, as Kafka's tools; the commit moves the LSO.
    assert end(client, "writer", pid, epoch).status_code == 200
    assert reset("read_committed") == 5  # past the COMMIT marker
    r = client.post(
        "/groups/g/offsets/reset", json={"topic": "in", "to": "latest", "isolation_level": "x"}
    )
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_REQUEST", r.text


def test_a_retried_json_produce_with_its_sequence_is_written_once(client: TestClient) -> None:
    """A client that retries a transactional JSON produce whose answer it lost (a timeout,
    a leader that died after its followers had the records) names the batch's sequence:
    the retry is answered with the first write's offsets, nothing written twice, so the
    committed transaction holds each record once. A gap in the numbering, or records of
    two partitions under one number, are refused."""
    create_topic(client, "out", 2)
    pid, epoch = init(client, "seq")
    values = [f"r{i}" for i in range(3)]

    def send(seq: int, vals: list[str], partition: int = 0) -> Any:
        return client.post(
            "/transactions/seq/topics/out/records",
            params={"producer_id": pid, "producer_epoch": epoch, "base_sequence": seq},
            json={
                "value_format": "string",
                "records": [{"value": v, "partition": partition} for v in vals],
            },
        )

    first = send(0, values)
    assert first.status_code == 200, first.text
    again = send(0, values)  # the same request once more
    assert again.status_code == 200, again.text

    def offsets(r: Any) -> list[tuple[int, int]]:
        return [(o["partition"], o["offset"]) for o in r.json()["offsets"]]

    assert offsets(again) == offsets(first) == [(0, 0), (0, 1), (0, 2)]
    r = send(5, ["gap"])
    assert r.status_code == 409 and r.json()["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    r = client.post(
        "/transactions/seq/topics/out/records",
        params={"producer_id": pid, "producer_epoch": epoch, "base_sequence": 3},
        json={
            "value_format": "string",
            "records": [{"value": "a", "partition": 0}, {"value": "b", "partition": 1}],
        },
    )
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_REQUEST", r.text
    r = send(3, ["next"])
    assert r.status_code == 200, r.text
    assert end(client, "seq", pid, epoch).status_code == 200
    assert committed(client, "out") == [*values, "next"]


@pytest.mark.parametrize("flush_messages", [None, "1"])
def test_a_json_transactional_produce_appends_off_the_event_loop(
    client: TestClient, flush_messages: str | None
) -> None:
    """As every acks=all produce: an append that may fsync (flush.messages) or wait for a
    leader's lock would stall every connection if made on the event loop."""
    import asyncio

    configs = {} if flush_messages is None else {"flush.messages": flush_messages}
    create_topic(client, "out", **configs)
    on_loop: list[bool] = []

    def where(_: Log) -> None:  # append listeners run on the appending thread
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            on_loop.append(False)

    _log(client, "out").add_append_listener(where)
    pid, epoch = init(client, "t-loop")
    r = produce(client, "t-loop", pid, epoch, "out", ["a", "b"])
    assert r.status_code == 200, r.text
    assert on_loop == [False]
    assert end(client, "t-loop", pid, epoch).status_code == 200
    assert committed(client, "out") == ["a", "b"]
