"""The producer's accumulator on its own: sealing, grouping, ordering, back-pressure."""

from __future__ import annotations

import pytest

from app.client.errors import BufferFull
from app.client.producer.accumulator import RecordAccumulator as _Accumulator
from app.client.producer.batch import ProducerBatch as _Batch
from app.client.producer.config import ProducerConfig
from app.client.types import TopicPartition
from app.common.batch import validate_batches


def make(**config: object) -> tuple[_Accumulator, list[int]]:
    notified: list[int] = []
    acc = _Accumulator(ProducerConfig(**config), lambda: notified.append(1))  # type: ignore[arg-type]
    return acc, notified


def test_one_request_per_partition_at_a_time_even_with_many_sealed() -> None:
    acc, _ = make(batch_size=1000, max_request_size=1000, linger_ms=0)
    for i in range(50):
        acc.append("t", 0, 1, None, b"%0100d" % i, [], 1, None, 1.0)
    groups, _ = acc.take(1e18, lambda tp: 1)
    assert len(groups) == 1  # the rest wait, so a retry can never be overtaken
    tp, batches = groups[0]
    assert tp == TopicPartition("t", 0) and len(batches) == 1
    more, _ = acc.take(1e18, lambda tp: 0)
    assert more == []


def test_sealed_batches_of_a_partition_share_a_request_up_to_max_request_size() -> None:
    acc, _ = make(batch_size=1000, max_request_size=3500, linger_ms=0)
    for i in range(50):
        acc.append("t", 0, 1, None, b"%0100d" % i, [], 1, None, 1.0)
    groups, _ = acc.take(1e18, lambda tp: 1)
    ((_, batches),) = groups
    assert 2 <= len(batches) <= 3
    body = b"".join(b.build() for b in batches)
    assert len(body) <= 3500
    found = validate_batches(body, 1 << 20)
    assert [h.record_count for _, h in found] == [b.count for b in batches]


def test_linger_deadline_is_reported_and_honoured() -> None:
    acc, notified = make(linger_ms=50)
    acc.append("t", 0, 1, None, b"x", [], 1, None, 1.0)
    assert notified  # a new batch wakes the sender so it can set a timer
    batch = acc.open[TopicPartition("t", 0)]
    groups, deadline = acc.take(batch.created + 0.01, lambda tp: 1)
    assert groups == [] and deadline == pytest.approx(batch.created + 0.05)
    groups, deadline = acc.take(batch.created + 0.06, lambda tp: 1)
    assert len(groups) == 1 and deadline is None


def test_buffer_full_raises_after_max_block() -> None:
    acc, _ = make(batch_size=1000, buffer_memory=2000, linger_ms=0)
    with pytest.raises(BufferFull):
        for i in range(100):
            acc.append("t", 0, 1, None, b"%0100d" % i, [], 1, None, 0.05)
    assert acc.buffered >= 2000


def test_send_many_spans_cover_every_value_in_order() -> None:
    acc, _ = make(batch_size=1000)
    values = [b"%050d" % i for i in range(500)]
    spans, finished = acc.append_many("t", None, 3, iter(values), 5, 1.0)
    assert finished
    assert sum(count for _, _, count in spans) == 500
    # Spans follow the input; each continues its batch where the last one stopped.
    decoded: list[int] = []
    for batch, start, count in spans:
        assert start + count <= batch.count
        decoded.extend(range(start, start + count))
    assert len(decoded) == 500


def test_sequences_are_handed_out_in_sending_order_and_given_back() -> None:
    acc, _ = make(batch_size=1000, max_request_size=1000, linger_ms=0)
    acc.producer_id, acc.producer_epoch = 5, 2
    values = iter([b"%050d" % i for i in range(40)])
    acc.append_many("t", 0, 1, values, 1, 1.0)
    acc.append("t", 0, 1, None, b"x", [], 1, None, 1.0)
    sent: list[_Batch] = []
    while True:
        groups, _ = acc.take(1e18, lambda tp: 1)
        if not groups:
            break
        ((_, batches),) = groups
        sent.extend(batches)
    expected = 0
    for batch in sent:
        data = batch.build()
        ((_, header),) = validate_batches(data, 1 << 20)
        assert (header.producer_id, header.producer_epoch) == (5, 2)
        assert header.base_sequence == batch.sequence == expected
        expected += batch.count
    assert expected == 41
    # A refusal of the last batch gives its numbers back; of an earlier one, not.
    acc.rewind(sent[:1])
    assert acc._next_sequence[TopicPartition("t", 0)] == 41
    acc.rewind(sent[-1:])
    assert acc._next_sequence[TopicPartition("t", 0)] == sent[-1].sequence
