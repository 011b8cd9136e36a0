"""Idempotent producers over HTTP: POST /producers, and binary produce that drops exact
retries, refuses gaps and fenced epochs, and survives restarts and lost answers."""

from __future__ import annotations

import random
from typing import Any

from api_helpers import create_topic, end_offsets, fetch, make_settings
from starlette.testclient import TestClient

from app.api import create_app
from app.common.batch import BatchBuilder, decode_records
from app.config import Settings

OCTET = {"content-type": "application/octet-stream"}


def pbatch(pid: int, epoch: int, seq: int, values: list[str]) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    for v in values:
        b.append(v.encode(), timestamp=1_700_000_000_000)
    return b.build()


def init(client: TestClient, **body: Any) -> tuple[int, int]:
    r = client.post("/producers", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert set(answer) == {"producer_id", "producer_epoch"}
    return answer["producer_id"], answer["producer_epoch"]


def send(client: TestClient, topic: str, partition: int, data: bytes, **params: Any) -> Any:
    return client.post(
        f"/topics/{topic}/partitions/{partition}/batches",
        content=data,
        headers=OCTET,
        params=params,
    )


def stored(client: TestClient, topic: str, partition: int) -> list[tuple[int, str]]:
    r = client.get(
        f"/topics/{topic}/partitions/{partition}/records",
        params={"offset": 0, "max_wait_ms": 0, "max_bytes": 1 << 24},
        headers={"accept": "application/octet-stream"},
    )
    assert r.status_code == 200, r.text
    return [(rec.offset, (rec.value or b"").decode()) for rec in decode_records(r.content)]


def test_init_producer_id_hands_out_unique_ids_across_restarts(settings: Settings) -> None:
    seen: list[int] = []
    for _ in range(3):
        with TestClient(create_app(settings)) as client:
            for body in ({}, {"transactional_id": None}):
                pid, epoch = init(client, **body)
                assert epoch == 0
                seen.append(pid)
            r = client.post("/producers")  # no body at all: the same as {}
            assert r.status_code == 200, r.text
            seen.append(r.json()["producer_id"])
    assert len(set(seen)) == len(seen) == 9
    assert seen == sorted(seen)
    assert (settings.data_dir / "producer-id-block").exists()


def test_init_producer_id_bumps_an_epoch(client: TestClient) -> None:
    pid, _ = init(client)
    assert init(client, producer_id=pid, producer_epoch=0) == (pid, 1)
    assert init(client, producer_id=pid, producer_epoch=1) == (pid, 2)
    fresh, epoch = init(client, producer_id=pid, producer_epoch=32767)
    assert fresh != pid and epoch == 0


def test_init_producer_id_bad_input(client: TestClient) -> None:
    cases: list[tuple[Any, int, str]] = [
        ({"transactional_id": ""}, 400, "INVALID_REQUEST"),
        ({"transaction_timeout_ms": 1000}, 400, "INVALID_REQUEST"),
        (
            {"transactional_id": "t", "transaction_timeout_ms": 10**9},
            400,
            "INVALID_TRANSACTION_TIMEOUT",
        ),
        ({"transactional_id": "t", "transaction_timeout_ms": 0}, 400, "INVALID_REQUEST"),
        ({"producer_id": 10**9, "producer_epoch": 0}, 400, "UNKNOWN_PRODUCER_ID"),
        ({"producer_id": 0}, 400, "INVALID_REQUEST"),
        ({"producer_id": 0, "producer_epoch": 40000}, 400, "INVALID_REQUEST"),
        ({"producer_id": "0", "producer_epoch": 0}, 400, "INVALID_REQUEST"),
        ({"producerid": 1}, 400, "INVALID_REQUEST"),
        ([], 400, "INVALID_REQUEST"),
    ]
    init(client)
    for body, status, code in cases:
        r = client.post("/producers", json=body)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error_code"] == code and r.json()["retriable"] is False
    r = client.post("/producers", content=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_REQUEST"


def test_a_batch_sent_twice_is_stored_once(client: TestClient) -> None:
    create_topic(client, "idem")
    pid, epoch = init(client)
    data = pbatch(pid, epoch, 0, ["a", "b", "c"])
    first = send(client, "idem", 0, data)
    assert first.status_code == 200, first.text
    assert first.json()["batches"] == [
        {"base_offset": 0, "last_offset": 2, "record_count": 3, "duplicate": False}
    ]
    again = send(client, "idem", 0, data)
    assert again.status_code == 200, again.text
    assert again.json()["batches"] == [
        {"base_offset": 0, "last_offset": 2, "record_count": 3, "duplicate": True}
    ]
    assert end_offsets(client, "idem") == [(0, 3, 3)]
    assert [r["value"] for r in fetch(client, "idem", 0, 0, value_format="string")["records"]] == [
        "a",
        "b",
        "c",
    ]
    assert send(client, "idem", 0, data, acks="0").status_code == 204
    assert end_offsets(client, "idem") == [(0, 3, 3)]


def test_a_body_mixing_a_retry_and_a_new_batch(client: TestClient) -> None:
    create_topic(client, "mixed")
    pid, epoch = init(client)
    b0 = pbatch(pid, epoch, 0, ["a", "b"])
    b1 = pbatch(pid, epoch, 2, ["c"])
    assert send(client, "mixed", 0, b0).status_code == 200
    r = send(client, "mixed", 0, b0 + b1)
    assert r.status_code == 200, r.text
    assert r.json()["batches"] == [
        {"base_offset": 0, "last_offset": 1, "record_count": 2, "duplicate": True},
        {"base_offset": 2, "last_offset": 2, "record_count": 1, "duplicate": False},
    ]
    assert stored(client, "mixed", 0) == [(0, "a"), (1, "b"), (2, "c")]


def test_a_gap_answers_out_of_order_and_leaves_the_log_alone(client: TestClient) -> None:
    create_topic(client, "gap")
    pid, epoch = init(client)
    assert send(client, "gap", 0, pbatch(pid, epoch, 0, ["a", "b"])).status_code == 200
    r = send(client, "gap", 0, pbatch(pid, epoch, 5, ["x"]))
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER" and body["retriable"] is False
    assert body["sequence"] == 5 and body["expected_sequence"] == 2
    assert body["producer_id"] == pid and body["topic"] == "gap" and body["partition"] == 0
    assert end_offsets(client, "gap") == [(0, 2, 2)]
    # A body whose second batch has the gap writes nothing at all.
    ok, bad = pbatch(pid, epoch, 2, ["c"]), pbatch(pid, epoch, 9, ["z"])
    assert send(client, "gap", 0, ok + bad).status_code == 409
    assert end_offsets(client, "gap") == [(0, 2, 2)]
    assert send(client, "gap", 0, ok).json()["batches"][0]["base_offset"] == 2


def test_an_old_epoch_answers_invalid_producer_epoch(client: TestClient) -> None:
    create_topic(client, "fence")
    pid, epoch = init(client)
    assert send(client, "fence", 0, pbatch(pid, epoch, 0, ["zombie-0"])).status_code == 200
    _, bumped = init(client, producer_id=pid, producer_epoch=epoch)
    # The new epoch starts again at 0; a batch from it fences the old one.
    assert send(client, "fence", 0, pbatch(pid, bumped, 0, ["new-0"])).status_code == 200
    r = send(client, "fence", 0, pbatch(pid, epoch, 1, ["zombie-1"]))
    assert r.status_code == 409, r.text
    body = r.json()
    assert body["error_code"] == "INVALID_PRODUCER_EPOCH" and body["retriable"] is False
    assert body["producer_epoch"] == epoch and body["current_epoch"] == bumped
    r = send(client, "fence", 0, pbatch(pid, bumped, 3, ["skips"]))
    assert r.status_code == 409 and r.json()["error_code"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert stored(client, "fence", 0) == [(0, "zombie-0"), (1, "new-0")]


def test_the_state_survives_a_restart(settings: Settings) -> None:
    with TestClient(create_app(settings)) as client:
        create_topic(client, "durable")
        pid, epoch = init(client)
        batches = [pbatch(pid, epoch, i * 2, [f"v{i * 2}", f"v{i * 2 + 1}"]) for i in range(6)]
        for b in batches:
            assert send(client, "durable", 0, b).status_code == 200
    with TestClient(create_app(settings)) as client:
        for i, b in enumerate(batches[1:], start=1):
            assert send(client, "durable", 0, b).json()["batches"] == [
                {
                    "base_offset": i * 2,
                    "last_offset": i * 2 + 1,
                    "record_count": 2,
                    "duplicate": True,
                }
            ]
        r = send(client, "durable", 0, pbatch(pid, epoch, 13, ["gap"]))
        assert r.status_code == 409
        assert send(client, "durable", 0, pbatch(pid, epoch, 12, ["v12"])).status_code == 200
        assert [v for _, v in stored(client, "durable", 0)] == [f"v{i}" for i in range(13)]


def test_lost_answers_and_retries_store_every_record_exactly_once(tmp_path: Any) -> None:
    """A producer with up to 5 batches in flight per partition, over 3 partitions, whose
    answers are lost at random: it resends every unanswered batch (in order, possibly
    several times, possibly after later batches went in) until each is answered. A clean
    restart of the broker happens in the middle. Every record must be stored exactly once,
    in send order, and every answer must name the offsets the records really have."""
    rng = random.Random(7)
    settings = make_settings(tmp_path, num_partitions=3)
    partitions = 3
    records_per_batch = 4
    batches_per_partition = 40
    client = TestClient(create_app(settings))
    client.__enter__()
    try:
        create_topic(client, "flaky", partitions=partitions)
        pid, epoch = init(client)
        # Per partition: the batches to send, in sequence order.
        todo = {
            p: [
                pbatch(
                    pid,
                    epoch,
                    i * records_per_batch,
                    [f"p{p}-r{i * records_per_batch + j}" for j in range(records_per_batch)],
                )
                for i in range(batches_per_partition)
            ]
            for p in range(partitions)
        }
        answered: dict[tuple[int, int], tuple[int, int]] = {}
        next_to_send = dict.fromkeys(range(partitions), 0)
        lost = duplicates = out_of_order_retries = 0
        restarted = False
        while len(answered) < partitions * batches_per_partition:
            if not restarted and len(answered) > partitions * batches_per_partition // 2:
                client.__exit__(None, None, None)
                client = TestClient(create_app(settings))
                client.__enter__()
                restarted = True
            p = rng.randrange(partitions)
            # In flight: sent, answer lost. As Kafka's max.in.flight.requests=5, a new
            # batch goes out only while the oldest unanswered one is among the last 5.
            unanswered = [i for i in range(next_to_send[p]) if (p, i) not in answered]
            window_open = not unanswered or next_to_send[p] - unanswered[0] < 5
            if next_to_send[p] < batches_per_partition and window_open and rng.random() < 0.6:
                i = next_to_send[p]
                next_to_send[p] += 1
            elif unanswered:
                i = unanswered[0]  # a retry resends the oldest unanswered batch first
            else:
                continue
            r = send(client, "flaky", p, todo[p][i])
            # Every send reaches the broker here, so anything but 200 (a gap, say) is a bug.
            assert r.status_code == 200, r.text
            retried_after_later = r.json()["batches"][0]["duplicate"] and next_to_send[p] > i + 1
            duplicates += r.json()["batches"][0]["duplicate"]
            out_of_order_retries += retried_after_later
            if rng.random() < 0.4:
                lost += 1  # the answer never reaches the producer
                continue
            (b,) = r.json()["batches"]
            answered[(p, i)] = (b["base_offset"], b["last_offset"])
        # The retries really were duplicates, also of batches older than the newest sent.
        assert lost > 50 and duplicates > 30 and out_of_order_retries > 10 and restarted
        for p in range(partitions):
            records = stored(client, "flaky", p)
            expected = [f"p{p}-r{n}" for n in range(batches_per_partition * records_per_batch)]
            assert [v for _, v in records] == expected
            offsets = dict(records)
            for i in range(batches_per_partition):
                first, last = answered[(p, i)]
                assert offsets[first] == f"p{p}-r{i * records_per_batch}"
                assert last - first == records_per_batch - 1
    finally:
        client.__exit__(None, None, None)
