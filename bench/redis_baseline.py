"""The standing baseline: Redis Streams through redis-py (pipelined XADD, XREAD COUNT)."""

from __future__ import annotations

import time

import redis

from bench.common import median_of, redis_server

VALUE = b"x" * 100


def produce(port: int, records: int, chunk: int = 1000) -> float:
    """Records/s of pipelined XADD, ``chunk`` commands per round trip."""
    client = redis.Redis(port=port)
    client.delete("bench")
    start = time.perf_counter()
    for _ in range(records // chunk):
        pipe = client.pipeline(transaction=False)
        for _ in range(chunk):
            pipe.xadd("bench", {"v": VALUE})
        pipe.execute()
    return records / (time.perf_counter() - start)


def consume(port: int, records: int, count: int = 1000) -> float:
    """Records/s of XREAD COUNT ``count`` from the start of the stream written by ``produce``."""
    client = redis.Redis(port=port)
    last = "0-0"
    seen = 0
    start = time.perf_counter()
    while seen < records:
        reply = client.xread({"bench": last}, count=count)
        entries = reply[0][1]
        seen += len(entries)
        last = entries[-1][0]
    return seen / (time.perf_counter() - start)


def run(records: int = 200_000, runs: int = 3) -> dict[str, object]:
    with redis_server() as port:
        prod, prod_samples = median_of(runs, lambda: produce(port, records))
        cons, cons_samples = median_of(runs, lambda: consume(port, records))
    return {
        "redis_xadd_records_per_s": prod,
        "redis_xadd_samples": prod_samples,
        "redis_xread_records_per_s": cons,
        "redis_xread_samples": cons_samples,
        "records": records,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
