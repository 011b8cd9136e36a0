"""The fetch-answer interpreter the SDK consumer, Spark tasks and followers share: answers fed
in by hand, no broker."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.common.batch import build_batch, iter_headers, stamp
from app.common.error_body import ServerError
from app.common.errors import OffsetOutOfRange, StoredBatchCorrupt
from app.common.fetch_answer import Action, Records, Refused, interpret, verified_prefix
from app.common.http1 import Response


def log_bytes(counts: list[int], base: int = 0) -> tuple[bytearray, list[int]]:
    """Batches of ``counts`` records each, back to back from offset ``base``; their positions."""
    body = bytearray()
    positions = []
    offset = base
    for n in counts:
        positions.append(len(body))
        batch = bytearray(build_batch([(None, b"v%d" % i) for i in range(n)]))
        stamp(batch, 0, offset, 0)  # base offset and epoch: outside the CRC-covered part
        body += batch
        offset += n
    return body, positions


def error(status: int, code: str, **fields: object) -> Response:
    body = {"error_code": code, "message": code.lower(), "retriable": False, **fields}
    return Response(status, {}, bytearray(orjson.dumps(body)))


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(1, 5), min_size=1, max_size=8),
    damage=st.none() | st.integers(0, 7),
    cut=st.integers(0, 60),
    check=st.booleans(),
)
def test_records_are_the_verified_whole_batches(
    counts: list[int], damage: int | None, cut: int, check: bool
) -> None:
    body, positions = log_bytes(counts, base=100)
    damaged = damage if damage is not None and damage < len(counts) else None
    if damaged is not None:
        body[positions[damaged] + 30] ^= 0xFF  # a timestamp byte: inside the CRC-covered part
    whole = len(counts)
    if cut and cut < len(body) - positions[-1]:
        del body[len(body) - cut :]  # the broker cut the last batch at max_bytes
        whole -= 1
    outcome = interpret(Response(200, {}, body), "t", 3, check_crcs=check)
    assert isinstance(outcome, Records)
    assert outcome.body is body
    good = whole if not check or damaged is None or damaged >= whole else damaged
    assert [pos for pos, _ in outcome.batches] == positions[:good]
    if check and damaged is not None and damaged < whole:
        assert isinstance(outcome.damaged, StoredBatchCorrupt)
        first = 100 + sum(counts[:damaged])
        assert (outcome.damaged.offset, outcome.damaged.last_offset) == (
            first,
            first + counts[damaged] - 1,
        )
        assert (outcome.damaged.topic, outcome.damaged.partition) == ("t", 3)
    else:
        assert outcome.damaged is None
    expected_next = 100 + sum(counts[:good]) if good else None
    assert outcome.next_offset == expected_next
    assert outcome.high_watermark is None


def test_the_high_watermark_header_is_read() -> None:
    body, _ = log_bytes([2])
    outcome = interpret(Response(200, {"logbus-high-watermark": "7"}, body), "t", 0)
    assert isinstance(outcome, Records) and outcome.high_watermark == 7


def test_verified_prefix_of_clean_batches_is_all_of_them() -> None:
    body, _ = log_bytes([1, 2, 3])
    batches = list(iter_headers(body))
    assert verified_prefix(body, batches, "t", 0) == (batches, None)


def test_not_leader_names_the_hint_and_marks_the_metadata_stale() -> None:
    answer = error(421, "NOT_LEADER_OR_FOLLOWER", leader=2, leader_url="http://b2:9")
    outcome = interpret(answer, "t", 0)
    assert isinstance(outcome, Refused)
    assert outcome.action is Action.NOT_LEADER
    assert outcome.leader_url == "http://b2:9" and outcome.stale_metadata
    assert outcome.error.error_code == "NOT_LEADER_OR_FOLLOWER"

    outcome = interpret(error(421, "NOT_LEADER_OR_FOLLOWER", leader=None, leader_url=None), "t", 0)
    assert isinstance(outcome, Refused)
    assert outcome.action is Action.NOT_LEADER and outcome.leader_url is None


def test_out_of_range_carries_the_log_bounds() -> None:
    answer = error(416, "OFFSET_OUT_OF_RANGE", log_start_offset=5, log_end_offset=9, offset=12)
    outcome = interpret(answer, "t", 0)
    assert isinstance(outcome, Refused) and outcome.action is Action.OUT_OF_RANGE
    assert isinstance(outcome.error, OffsetOutOfRange)
    assert (outcome.error.log_start_offset, outcome.error.log_end_offset) == (5, 9)
    assert not outcome.stale_metadata


@pytest.mark.parametrize(
    ("status", "code", "action", "stale"),
    [
        (503, "LEADER_NOT_AVAILABLE", Action.RETRY, True),
        (409, "FENCED_LEADER_EPOCH", Action.RETRY, True),
        (409, "UNKNOWN_LEADER_EPOCH", Action.RETRY, True),
        (503, "KAFKA_STORAGE_ERROR", Action.RETRY, False),
        (504, "REQUEST_TIMED_OUT", Action.RETRY, False),
        (404, "UNKNOWN_TOPIC_OR_PARTITION", Action.RAISE, False),
        (400, "INVALID_REQUEST", Action.RAISE, False),
        (403, "CLUSTER_AUTHORIZATION_FAILED", Action.RAISE, False),
    ],
)
def test_each_error_calls_for_one_action(
    status: int, code: str, action: Action, stale: bool
) -> None:
    outcome = interpret(error(status, code), "t", 0)
    assert isinstance(outcome, Refused)
    assert (outcome.error.error_code, outcome.action, outcome.stale_metadata) == (
        code,
        action,
        stale,
    )


def test_an_unknown_code_follows_the_bodys_retriable_flag() -> None:
    body = {"error_code": "SOMETHING_NEW", "message": "m", "retriable": True}
    outcome = interpret(Response(500, {}, bytearray(orjson.dumps(body))), "t", 0)
    assert isinstance(outcome, Refused) and isinstance(outcome.error, ServerError)
    assert outcome.action is Action.RETRY


@settings(max_examples=300, deadline=None)
@given(status=st.integers(201, 599), body=st.binary(max_size=300))
def test_any_error_answer_is_interpreted_never_raised(status: int, body: bytes) -> None:
    outcome = interpret(Response(status, {}, bytearray(body)), "t", 0)
    assert isinstance(outcome, Refused)
    # Not our error shape: a proxy or a crash; only a 5xx is worth another try.
    if not body.lstrip().startswith(b"{"):
        assert outcome.action is (Action.RETRY if status >= 500 else Action.RAISE)
