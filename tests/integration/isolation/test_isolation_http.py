"""isolation_level on the HTTP fetch (JSON and binary) and on ListOffsets, against a real
broker whose partitions hold open, committed and aborted transactions."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from isolation_helpers import TS, Broker, Writer, scenario

from app.api import fetch_service
from app.common.batch import decode_records, iter_headers
from app.common.fetch_answer import Records, interpret
from app.common.http1 import Response
from app.common.isolation import parse_aborted

MakeTopic = Callable[[], tuple[str, Writer]]


def fetch_json(broker: Broker, topic: str, offset: int, **params: Any) -> Any:
    with broker.http() as c:
        r = c.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": offset, "max_wait_ms": 0, "value_format": "binary", **params},
        )
        assert r.status_code == 200, r.text
        return r.json()


def values(answer: Any) -> list[bytes]:
    return [base64.b64decode(r["value"]) for r in answer["records"]]


def walk_json(broker: Broker, topic: str, **params: Any) -> tuple[list[bytes], int]:
    """Fetch from 0 until an answer is empty, following next_offset; (values, where it stopped)."""
    out: list[bytes] = []
    offset = 0
    while True:
        answer = fetch_json(broker, topic, offset, **params)
        out += values(answer)
        if answer["next_offset"] == offset:
            return out, offset
        offset = answer["next_offset"]


def test_json_read_committed_drops_aborted_records_and_stops_at_the_lso(
    broker: Broker, topic: MakeTopic
) -> None:
    name, w = topic()
    s = scenario(w)
    answer = fetch_json(broker, name, 0, isolation_level="read_committed")
    assert answer["last_stable_offset"] == s["lso"] == 9
    assert answer["high_watermark"] == s["end"]
    assert answer["next_offset"] <= s["lso"]
    got, stopped = walk_json(broker, name, isolation_level="read_committed", max_bytes=1)
    assert got == s["committed"] and stopped == s["lso"]
    # read_uncommitted (the default) sees every data record, no marker, past the LSO.
    got, stopped = walk_json(broker, name)
    assert got == s["uncommitted"] and stopped == s["end"]
    assert fetch_json(broker, name, 0)["last_stable_offset"] == s["lso"]
    # The commit releases the reader: the open transaction and what follows it come.
    w.commit(3)
    got, stopped = walk_json(broker, name, isolation_level="read_committed")
    assert got == s["after_commit"] and stopped == s["end"] + 1


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("txn"), st.sampled_from((1, 2, 3)), st.integers(1, 3)),
        st.tuples(st.just("plain"), st.just(0), st.integers(1, 2)),
        st.tuples(st.sampled_from(("commit", "abort")), st.sampled_from((1, 2, 3)), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


def walk_binary(broker: Broker, topic: str, start: int, max_bytes: int) -> list[bytes]:
    """Binary read_committed fetches from ``start``, filtered as the SDK does."""
    out: list[bytes] = []
    offset = start
    with broker.http() as c:
        while True:
            r = c.get(
                f"/topics/{topic}/partitions/0/records",
                params={
                    "offset": offset,
                    "max_wait_ms": 0,
                    "max_bytes": max_bytes,
                    "isolation_level": "read_committed",
                },
                headers={"Accept": "application/octet-stream"},
            )
            headers = {k.lower(): v for k, v in r.headers.items()}
            outcome = interpret(
                Response(200, headers, bytearray(r.content)), topic, 0, read_committed=True
            )
            assert isinstance(outcome, Records)
            if outcome.next_offset is None:
                return out
            for pos, h in outcome.batches:
                piece = outcome.body[pos : pos + h.size]
                out += [rec.value or b"" for rec in decode_records(piece, min_offset=offset)]
            offset = outcome.next_offset


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS, start_at=st.floats(0, 1), max_bytes=st.integers(1, 300))
def test_random_transactions_read_committed_over_http_matches_the_model(
    broker: Broker,
    topic: MakeTopic,
    ops: list[tuple[str, int, int]],
    start_at: float,
    max_bytes: int,
) -> None:
    name, w = topic()
    for i, (kind, pid, n) in enumerate(ops):
        if kind == "txn":
            w.txn(pid, [b"t%d-%d" % (i, j) for j in range(n)])
        elif kind == "plain":
            w.plain([b"p%d-%d" % (i, j) for j in range(n)])
        elif pid in w.open:
            (w.commit if kind == "commit" else w.abort)(pid)
    start = int(start_at * w.log.log_end_offset)
    expected = w.expected(start)
    offset, got = start, []
    while True:
        answer = fetch_json(
            broker, name, offset, isolation_level="read_committed", max_bytes=max_bytes
        )
        assert answer["last_stable_offset"] == w.lso()
        got += values(answer)
        if answer["next_offset"] == offset:
            break
        offset = answer["next_offset"]
    assert got == expected
    assert offset == max(start, w.lso())
    assert walk_binary(broker, name, start, max_bytes) == expected


def test_binary_read_committed_stops_at_the_lso_and_lists_the_aborted(
    broker: Broker, topic: MakeTopic
) -> None:
    name, w = topic()
    s = scenario(w)
    with broker.http() as c:
        r = c.get(
            f"/topics/{name}/partitions/0/records",
            params={"offset": 0, "max_wait_ms": 0, "isolation_level": "read_committed"},
            headers={"Accept": "application/octet-stream"},
        )
        plain = c.get(
            f"/topics/{name}/partitions/0/records",
            params={"offset": 0, "max_wait_ms": 0},
            headers={"Accept": "application/octet-stream"},
        )
    assert r.status_code == 200
    assert r.headers["Logbus-Last-Stable-Offset"] == "9"
    assert parse_aborted(r.headers["Logbus-Aborted-Transactions"]) == [(1, 2)]
    batches = [h for _, h in iter_headers(r.content)]
    assert batches[-1].next_offset <= s["lso"]
    # The raw body still holds the aborted batch: the list is what lets a client drop it.
    assert any(h.producer_id == 1 and not h.is_control for h in batches)
    outcome = interpret(
        Response(200, {k.lower(): v for k, v in r.headers.items()}, bytearray(r.content)),
        name,
        0,
        read_committed=True,
    )
    assert isinstance(outcome, Records) and outcome.next_offset == s["lso"]
    got = [
        rec.value
        for pos, h in outcome.batches
        for rec in decode_records(outcome.body[pos : pos + h.size])
    ]
    assert got == s["committed"]
    # read_uncommitted: no aborted list, every batch to the high watermark.
    assert "Logbus-Aborted-Transactions" not in plain.headers
    assert plain.headers["Logbus-Last-Stable-Offset"] == "9"
    assert [h for _, h in iter_headers(plain.content)][-1].next_offset == s["end"]


def test_an_open_transaction_holds_a_long_poll_until_it_commits(
    broker: Broker, topic: MakeTopic
) -> None:
    name, w = topic()
    w.plain([b"before"])
    w.txn(7, [b"t1", b"t2"])
    answers: list[Any] = []

    def poll() -> None:
        began = time.monotonic()
        answer = fetch_json(broker, name, 1, isolation_level="read_committed", max_wait_ms=10_000)
        answers.append((answer, time.monotonic() - began))

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)
    w.plain([b"after"])  # an append below nothing: still held at the LSO (1)
    time.sleep(0.3)
    assert not answers, "the reader passed the open transaction"
    w.commit(7)
    t.join(timeout=15)
    answer, took = answers[0]
    assert took < 8
    assert values(answer) == [b"t1", b"t2", b"after"]


def test_an_aborted_transaction_releases_the_reader_without_its_records(
    broker: Broker, topic: MakeTopic
) -> None:
    name, w = topic()
    w.txn(8, [b"gone"])
    w.plain([b"kept"])
    assert walk_json(broker, name, isolation_level="read_committed") == ([], 0)
    w.abort(8)
    assert walk_json(broker, name, isolation_level="read_committed") == ([b"kept"], 3)


def test_list_offsets_latest_is_the_lso_under_read_committed(
    broker: Broker, topic: MakeTopic
) -> None:
    name, w = topic()
    w.txn(4, [b"open"])

    def lookup(at: str, **params: str) -> int:
        with broker.http() as c:
            r = c.get(f"/topics/{name}/partitions/0/offsets", params={"at": at, **params})
            assert r.status_code == 200, r.text
            return int(r.json()["offset"])

    assert lookup("latest") == 1
    assert lookup("latest", isolation_level="read_committed") == 0
    # The only record at or after TS is past the LSO: none for a read_committed reader.
    assert lookup(str(TS)) == 0
    assert lookup(str(TS), isolation_level="read_committed") == -1
    w.commit(4)
    assert lookup("latest", isolation_level="read_committed") == 2
    assert lookup(str(TS), isolation_level="read_committed") == 0


@pytest.mark.parametrize("path", ["records?offset=0&", "offsets?"])
def test_an_unknown_isolation_level_is_a_400(broker: Broker, topic: MakeTopic, path: str) -> None:
    name, _ = topic()
    with broker.http() as c:
        r = c.get(f"/topics/{name}/partitions/0/{path}isolation_level=read_dirty")
    assert r.status_code == 400
    assert r.json()["error_code"] == "INVALID_REQUEST"
    assert "isolation_level" in r.text


def test_a_binary_answer_lists_at_most_max_aborted_transactions(
    broker: Broker, topic: MakeTopic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fetch_service, "MAX_ABORTED_PER_ANSWER", 2)
    name, w = topic()
    firsts = []
    for pid in (11, 12, 13, 14):
        firsts.append(w.txn(pid, [b"x"])[0])
    for pid in (11, 12, 13, 14):
        w.abort(pid)
    w.plain([b"kept"])
    answers = []
    with broker.http() as c:
        offset = 0
        while True:
            r = c.get(
                f"/topics/{name}/partitions/0/records",
                params={"offset": offset, "max_wait_ms": 0, "isolation_level": "read_committed"},
                headers={"Accept": "application/octet-stream"},
            )
            listed = parse_aborted(r.headers["Logbus-Aborted-Transactions"])
            batches = [h for _, h in iter_headers(r.content)]
            if not batches:
                break
            answers.append((offset, sorted(listed)))
            offset = batches[-1].next_offset
    assert offset == w.log.log_end_offset
    # The first answer stops before the third transaction begun in it; the next lists
    # the two still open at its offset and the two begun after.
    assert answers[0] == (0, [(11, firsts[0]), (12, firsts[1])])
    assert answers[1] == (
        firsts[2],
        [(11, firsts[0]), (12, firsts[1]), (13, firsts[2]), (14, firsts[3])],
    )
