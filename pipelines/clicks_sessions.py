"""Click events -> per-user sessions, with event-time session windows and a watermark.

Reads JSON click events (``{"user", "ts", "page"}``, keyed by user) from a
Logbus topic as a stream, groups each user's clicks into sessions that end
after ``gap`` without a click (Spark's ``session_window``), and writes every
closed session both back to a Logbus topic (JSON, keyed by user) and to
Parquet. The watermark bounds how late a click may arrive and still count;
it is also what closes sessions, so the generator ends with one far-future
click of a reserved user that moves the watermark past every real session.

``python -m pipelines.clicks_sessions`` (``make pipeline``) starts a broker on
a free port, generates clicks, runs the query with ``Trigger.AvailableNow``
and prints the sessions; ``--url`` uses a running broker instead.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.client import Admin, Producer

GAP_MINUTES = 30
WATERMARK_MINUTES = 10
# Clicks arrive up to this much out of order: well inside the watermark delay, so none is dropped.
JITTER_MS = 2 * 60_000
# The reserved user whose single click closes every real session (see the module docs).
CLOSER = "__watermark__"


@dataclass(frozen=True, slots=True, order=True)
class Session:
    user: str
    start_ms: int
    end_ms: int  # last click + gap, as Spark's session_window ends a session
    clicks: int


def generate(
    users: int, clicks_per_user: int, *, seed: int = 7, start_ms: int
) -> list[dict[str, Any]]:
    """Clicks in arrival order (roughly time order, jittered), each ``{"user", "ts", "page"}``."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for u in range(users):
        ts = start_ms + rng.randrange(0, 60 * 60_000)
        for _ in range(clicks_per_user):
            # Mostly short gaps; sometimes a break longer than the session gap.
            ts += (
                rng.randrange(5_000, 5 * 60_000)
                if rng.random() < 0.85
                else rng.randrange((GAP_MINUTES + 1) * 60_000, 3 * 60 * 60_000)
            )
            events.append({"user": f"user-{u}", "ts": ts, "page": f"/page/{rng.randrange(20)}"})
    events.sort(key=lambda e: e["ts"] + rng.randrange(0, JITTER_MS))
    last = max(e["ts"] for e in events)
    events.append({"user": CLOSER, "ts": last + 24 * 60 * 60_000, "page": "/"})
    return events


def expected_sessions(
    events: list[dict[str, Any]], gap_ms: int = GAP_MINUTES * 60_000
) -> list[Session]:
    """The sessions computed without Spark: a click ``gap`` or more after the previous one starts a new one."""
    by_user: dict[str, list[int]] = {}
    for e in events:
        if e["user"] != CLOSER:
            by_user.setdefault(e["user"], []).append(e["ts"])
    out = []
    for user, stamps in sorted(by_user.items()):
        stamps.sort()
        first = prev = stamps[0]
        count = 1
        for ts in stamps[1:]:
            if ts - prev >= gap_ms:
                out.append(Session(user, first, prev + gap_ms, count))
                first, count = ts, 0
            prev = ts
            count += 1
        out.append(Session(user, first, prev + gap_ms, count))
    return out


def produce_events(url: str, topic: str, events: list[dict[str, Any]]) -> None:
    with Producer(url, linger_ms=5) as producer:
        for e in events:
            producer.send(topic, json.dumps(e).encode(), e["user"].encode(), timestamp=int(e["ts"]))
        producer.flush()


def run(
    spark: Any,
    url: str,
    *,
    clicks_topic: str,
    sessions_topic: str,
    parquet_dir: Path,
    checkpoint_dir: Path,
    max_offsets_per_trigger: int | None = None,
) -> None:
    """Process every click available now; a rerun with the same checkpoint picks up only new ones."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from app.spark import register

    register(spark)
    reader = (
        spark.readStream.format("logbus")
        .option("logbus.url", url)
        .option("subscribe", clicks_topic)
        .option("startingOffsets", "earliest")
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    clicks = (
        reader.load()
        .select(
            F.from_json(F.col("value").cast("string"), "user string, ts long, page string").alias(
                "c"
            )
        )
        .select(
            "c.user",
            "c.page",
            F.timestamp_millis(F.col("c.ts")).alias("event_time"),
        )
    )
    sessions = (
        clicks.withWatermark("event_time", f"{WATERMARK_MINUTES} minutes")
        .groupBy("user", F.session_window("event_time", f"{GAP_MINUTES} minutes").alias("s"))
        .agg(F.count("*").alias("clicks"))
        .select(
            "user",
            F.col("s.start").alias("session_start"),
            F.col("s.end").alias("session_end"),
            "clicks",
        )
    )

    def write_both(output: DataFrame, batch_id: int) -> None:
        # The closer is dropped only here: a filter in the streaming query would be
        # pushed below the watermark, and the closer would no longer move it.
        batch = output.where(F.col("user") != CLOSER).persist()
        try:
            batch.write.mode("append").parquet(str(parquet_dir))
            (
                batch.select(
                    F.col("user").alias("key"),
                    F.to_json(F.struct("user", "session_start", "session_end", "clicks")).alias(
                        "value"
                    ),
                )
                .write.format("logbus")
                .option("logbus.url", url)
                .option("topic", sessions_topic)
                .mode("append")
                .save()
            )
        finally:
            batch.unpersist()

    query = (
        sessions.writeStream.outputMode("append")
        .foreachBatch(write_both)
        .option("checkpointLocation", str(checkpoint_dir))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the sessions query failed: {query.exception()}")


def spark_session(app_name: str = "logbus-clicks-sessions") -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextmanager
def local_broker(data_dir: Path) -> Iterator[str]:
    """A ``logbus serve`` subprocess on a free loopback port, stopped on exit."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "serve",
            "--data-dir",
            str(data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the broker did not start")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def read_sessions(spark: Any, parquet_dir: Path) -> list[Session]:
    rows = spark.read.parquet(str(parquet_dir)).collect()
    return sorted(
        Session(
            r.user,
            int(r.session_start.timestamp() * 1000),
            int(r.session_end.timestamp() * 1000),
            int(r.clicks),
        )
        for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running broker (default: start one on a free port)")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--clicks-per-user", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None, help="Parquet and checkpoint directory")
    args = parser.parse_args(argv)
    work = Path(args.out or tempfile.mkdtemp(prefix="logbus-pipeline-"))
    events = generate(args.users, args.clicks_per_user, start_ms=1_767_225_600_000)

    def go(url: str) -> list[Session]:
        with Admin(url) as admin:
            topics = admin.list_topics()
            for name in ("clicks", "sessions"):
                if name not in topics:
                    admin.create_topic(name, partitions=2)
        produce_events(url, "clicks", events)
        spark = spark_session()
        run(
            spark,
            url,
            clicks_topic="clicks",
            sessions_topic="sessions",
            parquet_dir=work / "sessions.parquet",
            checkpoint_dir=work / "checkpoint",
        )
        return read_sessions(spark, work / "sessions.parquet")

    if args.url:
        got = go(args.url)
    else:
        data = work / "broker-data"
        with local_broker(data) as url:
            got = go(url)
        shutil.rmtree(data, ignore_errors=True)
    want = expected_sessions(events)
    print(
        f"{len(events) - 1} clicks of {args.users} users -> {len(got)} sessions "
        f"(Parquet: {work / 'sessions.parquet'}, topic 'sessions')"
    )
    for s in got[:5]:
        print(f"  {s.user}: {s.clicks} clicks, {(s.end_ms - s.start_ms) // 60_000} min")
    ok = got == want
    print(
        "matches the plain-Python computation"
        if ok
        else "MISMATCH with the plain-Python computation"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
