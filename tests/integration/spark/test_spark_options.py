"""Offset planning of the Spark source (app.spark.options): no Spark or broker needed."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.client import TopicPartition
from app.spark.options import (
    DataLoss,
    OffsetRange,
    OptionError,
    cap,
    check_loss,
    check_within,
    named_partitions,
    offsets_from_json,
    offsets_json,
    parse_offsets,
    reconcile,
    resolve,
    split,
)

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def _covers(parts: list[OffsetRange], ranges: list[OffsetRange]) -> None:
    """``parts`` tile every range exactly: contiguous, no gap, no overlap."""
    for r in ranges:
        mine = sorted(
            (p for p in parts if (p.topic, p.partition) == (r.topic, r.partition)),
            key=lambda p: p.start,
        )
        assert mine[0].start == r.start and mine[-1].end == r.end
        assert all(x.end == y.start for x, y in pairwise(mine))


def test_split_shares_min_partitions_by_size() -> None:
    ranges = [OffsetRange("a", 0, 0, 900), OffsetRange("a", 1, 100, 400)]
    parts = split(ranges, 8)
    _covers(parts, ranges)
    assert len(parts) >= 8
    assert sum(p.partition == 0 for p in parts) == 6  # 900 of 1200 offsets: 3/4 of 8
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 or max(sizes) <= 2 * min(sizes)


def test_split_leaves_enough_ranges_alone_and_drops_empty_ones() -> None:
    ranges = [OffsetRange("a", 0, 0, 10), OffsetRange("a", 1, 5, 5), OffsetRange("b", 0, 0, 3)]
    assert split(ranges, None) == [ranges[0], ranges[2]]
    assert split(ranges, 2) == [ranges[0], ranges[2]]
    # Never more parts than records.
    tiny = [OffsetRange("a", 0, 0, 3)]
    assert [p.size for p in split(tiny, 10)] == [1, 1, 1]


def test_offsets_json_round_trip_like_kafka() -> None:
    spec = parse_offsets('{"a": {"0": 23, "1": -2}, "b": {"0": -1}}', "startingOffsets")
    assert spec == {A0: 23, A1: -2, B0: -1}
    assert offsets_json({A0: 23, A1: 5}) == {"a": {"0": 23, "1": 5}}
    assert offsets_from_json({"a": {"0": 23, "1": 5}}) == {A0: 23, A1: 5}
    assert parse_offsets(" earliest ", "x") == "earliest"
    with pytest.raises(OptionError):
        parse_offsets("[1, 2]", "startingOffsets")


def test_resolve_maps_minus_two_and_minus_one_to_log_bounds() -> None:
    earliest, latest = {A0: 10, A1: 0, B0: 4}, {A0: 50, A1: 7, B0: 9}
    got = resolve({A0: -2, A1: -1}, [A0, A1, B0], earliest, latest, -1)
    assert got == {A0: 10, A1: 7, B0: 9}
    assert resolve("earliest", [A0, B0], earliest, latest, -1) == {A0: 10, B0: 4}


def test_check_loss_fails_or_skips_deleted_offsets() -> None:
    assert check_loss(A0, 12, 10, True) == 12
    assert check_loss(A0, 3, 10, False) == 10
    with pytest.raises(DataLoss):
        check_loss(A0, 3, 10, True)


def test_cap_limits_a_trigger_to_max_rows() -> None:
    start, end = {A0: 0, A1: 100, B0: 0}, {A0: 300, A1: 200, B0: 0}
    capped = cap(start, end, 100)
    assert sum(capped[tp] - start[tp] for tp in capped) <= 100
    assert capped[A0] - start[A0] == 75 and capped[A1] - start[A1] == 25 and capped[B0] == 0
    assert cap(start, end, 1000) == end


def test_named_partitions_lists_what_exists_and_what_is_missing() -> None:
    counts = {"a": 2, "b": 1, "__consumer_offsets": 50}
    assert named_partitions({"subscribe": "a, x"}, counts) == ([A0, A1], ["topic 'x'"])
    assert named_partitions({"subscribepattern": ".*"}, counts) == ([A0, A1, B0], [])
    assert named_partitions({"assign": '{"a": [1, 2]}'}, counts) == ([A1], ["partition a-2"])
    with pytest.raises(OptionError, match="exactly one"):
        named_partitions({"subscribe": "a", "assign": '{"a": [0]}'}, counts)


def test_reconcile_reads_new_partitions_from_their_start_and_keeps_offsets_in_the_log() -> None:
    earliest, latest = {A0: 5, A1: 0, B0: 3}, {A0: 50, A1: 7, B0: 9}
    # A1 is new since the checkpoint; A0 below the log start is check_loss's business.
    assert reconcile({A0: 2, B0: 9}, earliest, latest, True) == {A0: 2, A1: 0, B0: 9}


def test_reconcile_treats_offsets_that_went_back_as_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The topic re-created: the checkpoint says 500, the log holds [0, 100).
    earliest, latest = {A0: 0, A1: 0}, {A0: 100, A1: 100}
    with pytest.raises(DataLoss, match=r"a-0: checkpointed offset 500 .* \[0, 100\)"):
        reconcile({A0: 500, A1: 20}, earliest, latest, True)
    with caplog.at_level("WARNING"):
        assert reconcile({A0: 500, A1: 20}, earliest, latest, False) == {A0: 0, A1: 20}
    assert (
        "a-0: checkpointed offset 500" in caplog.text and "reading it from offset 0" in caplog.text
    )
    caplog.clear()
    # report=False: the caller reports later (latestOffset before partitions).
    assert reconcile({A0: 500}, earliest, latest, False, report=False) == {A0: 0, A1: 0}
    assert caplog.text == ""


def test_reconcile_treats_partitions_that_went_away_as_data_loss(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # b deleted; a re-created with one partition fewer.
    earliest, latest = {A0: 0}, {A0: 10}
    with pytest.raises(DataLoss, match=r"a-1: the partition is gone .* offset 7"):
        reconcile({A0: 3, A1: 7, B0: 1}, earliest, latest, True)
    with caplog.at_level("WARNING"):
        assert reconcile({A0: 3, A1: 7, B0: 1}, earliest, latest, False) == {A0: 3}
    assert "a-1: the partition is gone" in caplog.text and "b-0" in caplog.text


def test_check_within_refuses_offsets_past_the_high_watermark() -> None:
    check_within("endingOffsets", {A0: 10, A1: 0}, {A0: 10, A1: 0})
    with pytest.raises(OptionError, match=r"endingOffsets: a-1: offset 11 .* high watermark 10"):
        check_within("endingOffsets", {A0: 3, A1: 11}, {A0: 10, A1: 10})


@st.composite
def _logs_and_checkpoint(
    draw: st.DrawFn,
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Logs now (start, high watermark) and a checkpoint that may name gone partitions
    and offsets before, inside or past each log."""
    universe = [TopicPartition(t, p) for t in "ab" for p in range(3)]
    present = draw(st.sets(st.sampled_from(universe)))
    earliest: dict[TopicPartition, int] = {}
    latest: dict[TopicPartition, int] = {}
    for tp in sorted(present):
        earliest[tp] = draw(st.integers(0, 50))
        latest[tp] = earliest[tp] + draw(st.integers(0, 50))
    checkpointed = draw(st.dictionaries(st.sampled_from(universe), st.integers(0, 120)))
    return checkpointed, earliest, latest


@settings(max_examples=300, deadline=None)
@given(_logs_and_checkpoint())
def test_reconcile_never_skips_silently_and_never_reads_past_the_end(
    case: tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, int]],
) -> None:
    checkpointed, earliest, latest = case
    lost = sorted(tp for tp, o in checkpointed.items() if tp not in latest or o > latest[tp])
    got = reconcile(checkpointed, earliest, latest, False, report=False)
    # Every partition that exists is read, from a point inside its log (or below its
    # start, for check_loss), never past its end.
    assert set(got) == set(latest)
    for tp, offset in got.items():
        assert offset <= latest[tp]
        if tp in checkpointed and tp not in lost:
            assert offset == checkpointed[tp]  # nothing went back: resume exactly there
        else:
            assert offset == earliest[tp]  # new, or went back: from the log start
    if lost:
        first = lost[0]
        with pytest.raises(DataLoss, match=f"{first.topic}-{first.partition}: "):
            reconcile(checkpointed, earliest, latest, True)
    else:
        assert reconcile(checkpointed, earliest, latest, True) == got
