"""Kafka protocol libraries: decode and encode per request, for the Kafka door's choice.

``python -m bench.kafka_protocol`` prints the figures as JSON; ``run()`` returns them.
Two maintained definitions of Kafka's messages, both generated from Kafka's message JSON
files, are measured on the messages the Kafka door handles per request:

* ``kio`` (Aiven): frozen, typed dataclasses; decoding through its compiled reader
  (``_kio_native``), encoding in Python;
* ``kafka_python``: kafka-python 3's ``kafka.protocol`` classes (pure Python both ways).

Messages (flexible versions, request header v2 / response header v1, as librdkafka 2.x
sends them): ``produce_decode`` (a ProduceRequest v9 with one 16 KiB batch: what the
broker decodes per produce), ``fetch_response_encode`` (a FetchResponse v12 with one
partition of 16 KiB records: what it encodes per fetch; the Kafka door itself never copies
the records, see ``app/kafka/encode.py``), ``metadata_response_encode`` (a
MetadataResponse v12, 10 topics of 3 partitions) and ``metadata_request_decode``. Each
figure is the median of ``rounds`` runs of ``n`` operations, in microseconds per
operation; ``ratio`` is kafka-python's time over kio's, same run.
"""

from __future__ import annotations

import io
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

BATCH = b"\x00" * 16_384


def _time(fn: Callable[[], object], n: int, rounds: int) -> float:
    runs = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs)


def _kio_cases() -> dict[str, Callable[[], object]]:
    from kio.schema.fetch.v12 import response as fetch_res
    from kio.schema.metadata.v12 import request as meta_req
    from kio.schema.metadata.v12 import response as meta_res
    from kio.schema.produce.v9 import request as produce_req
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import i16, i32, i32Timedelta, i64

    header = RequestHeader(
        request_api_key=i16(0), request_api_version=i16(9), correlation_id=i32(7), client_id="b"
    )
    produce = produce_req.ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(__import__("datetime").timedelta(seconds=30)),
        topic_data=(
            produce_req.TopicProduceData(
                name=produce_req.TopicName("t"),
                partition_data=(
                    produce_req.PartitionProduceData(index=i32(0), records=BATCH),  # type: ignore[arg-type]
                ),
            ),
        ),
    )
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, header)
    entity_writer(produce_req.ProduceRequest)(buf, produce)
    produce_bytes = buf.getvalue()
    read_header = entity_reader(RequestHeader)
    read_produce = entity_reader(produce_req.ProduceRequest)

    def produce_decode() -> object:
        _, size = read_header(produce_bytes, 0)
        return read_produce(produce_bytes, size)

    fetch = fetch_res.FetchResponse(
        throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
        error_code=fetch_res.ErrorCode.none,
        session_id=i32(0),
        responses=(
            fetch_res.FetchableTopicResponse(
                topic=fetch_res.TopicName("t"),
                partitions=(
                    fetch_res.PartitionData(
                        partition_index=i32(0),
                        error_code=fetch_res.ErrorCode.none,
                        high_watermark=i64(100),
                        last_stable_offset=i64(100),
                        log_start_offset=i64(0),
                        aborted_transactions=(),
                        preferred_read_replica=fetch_res.BrokerId(-1),
                        records=BATCH,  # type: ignore[arg-type]
                    ),
                ),
            ),
        ),
    )
    write_fetch = entity_writer(fetch_res.FetchResponse)

    def fetch_response_encode() -> object:
        out = io.BytesIO()
        write_fetch(out, fetch)
        return out.getvalue()

    meta = meta_res.MetadataResponse(
        throttle_time=i32Timedelta.parse(__import__("datetime").timedelta(0)),
        brokers=(
            meta_res.MetadataResponseBroker(
                node_id=meta_res.BrokerId(1), host="127.0.0.1", port=i32(9092), rack=None
            ),
        ),
        cluster_id="c",
        controller_id=meta_res.BrokerId(1),
        topics=tuple(
            meta_res.MetadataResponseTopic(
                error_code=meta_res.ErrorCode.none,
                name=meta_res.TopicName(f"topic-{t}"),
                topic_id=uuid.uuid4(),
                is_internal=False,
                partitions=tuple(
                    meta_res.MetadataResponsePartition(
                        error_code=meta_res.ErrorCode.none,
                        partition_index=i32(p),
                        leader_id=meta_res.BrokerId(1),
                        leader_epoch=i32(0),
                        replica_nodes=(meta_res.BrokerId(1),),
                        isr_nodes=(meta_res.BrokerId(1),),
                        offline_replicas=(),
                    )
                    for p in range(3)
                ),
                topic_authorized_operations=i32(-2147483648),
            )
            for t in range(10)
        ),
    )
    write_meta = entity_writer(meta_res.MetadataResponse)

    def metadata_response_encode() -> object:
        out = io.BytesIO()
        write_meta(out, meta)
        return out.getvalue()

    mreq = meta_req.MetadataRequest(
        topics=tuple(
            meta_req.MetadataRequestTopic(topic_id=None, name=meta_req.TopicName(f"topic-{t}"))
            for t in range(10)
        ),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    out = io.BytesIO()
    entity_writer(meta_req.MetadataRequest)(out, mreq)
    mreq_bytes = out.getvalue()
    read_mreq = entity_reader(meta_req.MetadataRequest)

    def metadata_request_decode() -> object:
        return read_mreq(mreq_bytes, 0)

    return {
        "produce_decode": produce_decode,
        "fetch_response_encode": fetch_response_encode,
        "metadata_response_encode": metadata_response_encode,
        "metadata_request_decode": metadata_request_decode,
    }


def _kafka_python_cases() -> dict[str, Callable[[], object]]:
    from kafka.protocol.consumer import FetchResponse
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse
    from kafka.protocol.producer import ProduceRequest

    P = ProduceRequest
    produce = P[9](
        transactional_id=None,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            P.TopicProduceData(
                name="t",
                partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=BATCH)],
            )
        ],
    )
    produce.with_header(correlation_id=7, client_id="b")
    produce_bytes = produce.encode(header=True)

    def produce_decode() -> object:
        return P.decode(produce_bytes, version=9, header=True)

    F = FetchResponse
    fetch = F[12](
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            F.FetchableTopicResponse(
                topic="t",
                partitions=[
                    F.FetchableTopicResponse.PartitionData(
                        partition_index=0,
                        error_code=0,
                        high_watermark=100,
                        last_stable_offset=100,
                        log_start_offset=0,
                        aborted_transactions=[],
                        preferred_read_replica=-1,
                        records=BATCH,
                    )
                ],
            )
        ],
    )

    def fetch_response_encode() -> object:
        return fetch.encode(version=12)

    M = MetadataResponse
    meta = M[12](
        throttle_time_ms=0,
        brokers=[M.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092, rack=None)],
        cluster_id="c",
        controller_id=1,
        topics=[
            M.MetadataResponseTopic(
                error_code=0,
                name=f"topic-{t}",
                topic_id=uuid.uuid4(),
                is_internal=False,
                partitions=[
                    M.MetadataResponseTopic.MetadataResponsePartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=1,
                        leader_epoch=0,
                        replica_nodes=[1],
                        isr_nodes=[1],
                        offline_replicas=[],
                    )
                    for p in range(3)
                ],
            )
            for t in range(10)
        ],
    )

    def metadata_response_encode() -> object:
        return meta.encode(version=12)

    R = MetadataRequest
    mreq = R[12](
        topics=[R.MetadataRequestTopic(topic_id=None, name=f"topic-{t}") for t in range(10)],
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    mreq_bytes = mreq.encode(version=12)

    def metadata_request_decode() -> object:
        return R.decode(mreq_bytes, version=12)

    return {
        "produce_decode": produce_decode,
        "fetch_response_encode": fetch_response_encode,
        "metadata_response_encode": metadata_response_encode,
        "metadata_request_decode": metadata_request_decode,
    }


def run(n: int = 2_000, rounds: int = 5) -> dict[str, Any]:
    """Microseconds per operation, per library and message, and kafka-python over kio."""
    kio_cases, kp_cases = _kio_cases(), _kafka_python_cases()
    result: dict[str, Any] = {"n": n, "rounds": rounds}
    for name in kio_cases:
        k = _time(kio_cases[name], n, rounds)
        p = _time(kp_cases[name], n, rounds)
        result[name] = {
            "kio_us": round(k, 2),
            "kafka_python_us": round(p, 2),
            "ratio": round(p / k, 2),
        }
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
