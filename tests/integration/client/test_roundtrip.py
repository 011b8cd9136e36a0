"""A million records through the SDK and back: nothing lost, duplicated or reordered."""

from __future__ import annotations

import struct
from collections.abc import Callable

from app.client import Consumer, Producer, TopicPartition

MakeTopic = Callable[..., str]
N = 1_000_000
PARTITIONS = 4
PAD = b"." * 92  # 8-byte sequence number + padding = 100-byte values


def test_million_records_round_trip(broker_url: str, make_topic: MakeTopic) -> None:
    topic = make_topic(PARTITIONS)
    pack = struct.Struct(">Q").pack
    with Producer(broker_url, linger_ms=5) as producer:
        send = producer.send
        # Keys for a tenth of the records, so both the keyed and the sticky paths run.
        for i in range(N):
            if i % 10 == 0:
                send(topic, pack(i) + PAD, key=b"%d" % (i % 97))
            else:
                send(topic, pack(i) + PAD)
    seen = bytearray(N)
    last = dict.fromkeys(range(PARTITIONS), -1)
    unpack = struct.Struct(">Q").unpack_from
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    with Consumer(broker_url, auto_offset_reset="earliest", fetch_max_wait_ms=100) as consumer:
        consumer.assign(tps)
        assert sum(consumer.end_offsets(tps).values()) == N
        count = 0
        while count < N:
            records = consumer.poll(timeout_ms=10_000)
            assert records, f"stalled after {count} records"
            for r in records:
                assert r.value is not None
                (seq,) = unpack(r.value)
                assert not seen[seq], f"record {seq} delivered twice"
                seen[seq] = 1
                # Within a partition, send order is log order.
                assert seq > last[r.partition], f"{seq} after {last[r.partition]} in {r.partition}"
                last[r.partition] = seq
            count += len(records)
        assert consumer.poll(timeout_ms=200) == []
        assert [consumer.position(tp) for tp in tps] == list(consumer.end_offsets(tps).values())
    assert seen == bytearray(b"\x01") * N
