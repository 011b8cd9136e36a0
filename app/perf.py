"""``logbus perf produce|consume|e2e``: load generators in the spirit of Kafka's perf tools.

* ``produce`` sends ``--records`` values of ``--record-size`` bytes through
  :class:`app.client.Producer` at up to ``--throughput`` records/s, with
  ``--keys`` distinct keys (default: none, as Kafka's tool), and times every
  record from ``send`` to its acknowledgement with a delivery callback per
  record: acknowledgement time minus the record's timestamp, which ``send``
  takes from the wall clock in milliseconds (so latencies have 1 ms
  resolution, as Kafka's ProducerPerformance measures them);
* ``consume`` reads ``--records`` records from the start of the topic with
  :meth:`app.client.Consumer.poll_columns` and reports the rate;
* ``e2e`` does both at once: every value starts with its send time (wall
  clock, ns) and a sequence number, and the consumer measures receive time
  minus send time per record, and checks that nothing was lost or duplicated.

A progress bar with the running rate goes to stderr when it is a terminal
(never with ``--json``); the summary goes to stdout, as one JSON object with
``--json``. Everything goes through the SDK, as an application would.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import string
import struct
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    from app.client import RecordMetadata

# The e2e record's value starts with these: send time (ns since the epoch) and sequence.
E2E_STAMP = struct.Struct(">qq")
# Pacing sends in steps of ~5 ms worth of records: finer steps are sleeps
# shorter than the OS timer slack, coarser ones make bursts that show up as latency.
PACE_STEP_S = 0.005
UNPACED_STEP = 10_000
DEFAULT_THROUGHPUT_E2E = 10_000


class PerfError(Exception):
    """A run that could not be done as asked (exit status 1)."""


# ---------------------------------------------------------------- measuring


@dataclass(frozen=True, slots=True)
class LatencySummary:
    count: int
    avg: float
    p50: float
    p95: float
    p99: float
    p999: float
    max: float

    def as_dict(self) -> dict[str, float]:
        return {
            "avg": round(self.avg, 3),
            "p50": round(self.p50, 3),
            "p95": round(self.p95, 3),
            "p99": round(self.p99, 3),
            "p999": round(self.p999, 3),
            "max": round(self.max, 3),
        }


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an ascending sequence."""
    if not ordered:
        return 0.0
    # Rounded first: 99.9 / 100 * 1000 is 999.0000000000001 in floats, whose ceiling is 1000.
    rank = max(1, math.ceil(round(q * len(ordered) / 100, 9)))
    return ordered[min(rank, len(ordered)) - 1]


def summarize(latencies_ms: Sequence[float]) -> LatencySummary:
    ordered = sorted(latencies_ms)
    n = len(ordered)
    return LatencySummary(
        count=n,
        avg=sum(ordered) / n if n else 0.0,
        p50=percentile(ordered, 50),
        p95=percentile(ordered, 95),
        p99=percentile(ordered, 99),
        p999=percentile(ordered, 99.9),
        max=ordered[-1] if n else 0.0,
    )


class Pacer:
    """Holds a sender to ``rate`` records/s (<= 0: unlimited), one step of records at a time.

    ``step`` records are sent back to back, then the pacer sleeps until the
    schedule catches up: a sleep per step, not per record, keeps the cost of
    pacing off the send path at a million records/s.
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self.rate = rate
        self.clock = clock
        self.start = clock()
        self.step = max(1, min(UNPACED_STEP, int(rate * PACE_STEP_S))) if rate > 0 else UNPACED_STEP

    def wait(self, sent: int) -> None:
        """Sleep until ``sent`` records are due."""
        if self.rate <= 0:
            return
        ahead = self.start + sent / self.rate - self.clock()
        if ahead > 0:
            time.sleep(ahead)


def payload(size: int, seed: int = 0) -> bytes:
    """A record value: random letters, so compression has real work (as Kafka's tool does)."""
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters, k=size)).encode()


# ---------------------------------------------------------------- progress


def _rate_column() -> ProgressColumn:
    """A column with the running records/s (rich's own speed columns count bytes)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            speed = task.finished_speed or task.speed
            return Text("-" if speed is None else f"{speed:,.0f} rec/s", style="cyan")

    return RateColumn()


@contextmanager
def progress_bar(enabled: bool, total: int, label: str) -> Iterator[Callable[[int], None]]:
    """Yields ``advance(n)``; a live bar on stderr only when ``enabled`` (a TTY, not --json)."""
    if not enabled:
        yield lambda n: None
        return
    # rich loads only here: `logbus --help` and the other commands do not pay for it.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress(
        f"[bold]{label}",
        BarColumn(),
        MofNCompleteColumn(),
        _rate_column(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        refresh_per_second=8,
    )
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


# ---------------------------------------------------------------- runs


@dataclass(frozen=True, slots=True)
class PerfOptions:
    url: str
    topic: str
    records: int
    record_size: int = 100
    throughput: float = -1
    batch_size: int | None = None
    linger_ms: float | None = None
    acks: str = "1"
    compression: str = "none"
    partitions: int | None = None
    keys: int = 0
    timeout_ms: int = 10_000
    fetch_max_wait_ms: int = 500
    e2e_same_process: bool = False
    progress: bool = False

    def producer_config(self, default_linger_ms: float | None = None) -> dict[str, Any]:
        config: dict[str, Any] = {"acks": self.acks, "compression": self.compression}
        if self.batch_size is not None:
            config["batch_size"] = self.batch_size
            # A batch must fit a request; bigger batches need bigger requests.
            config["max_request_size"] = max(4 * 1024 * 1024, self.batch_size)
            config["buffer_memory"] = max(64 * 1024 * 1024, 4 * self.batch_size)
        linger = self.linger_ms if self.linger_ms is not None else default_linger_ms
        if linger is not None:
            config["linger_ms"] = linger
        return config


def ensure_topic(url: str, topic: str, partitions: int | None) -> int:
    """The topic's partition count, creating it (``partitions``, or the broker's default) if missing."""
    from app.client import Admin
    from app.common.errors import TopicAlreadyExists, UnknownTopicOrPartition

    with Admin(url) as admin:
        try:
            return len(admin.describe_topic(topic).partitions)
        except UnknownTopicOrPartition:
            pass
        try:
            return len(admin.create_topic(topic, partitions).partitions)
        except TopicAlreadyExists:  # created meanwhile by someone else
            return len(admin.describe_topic(topic).partitions)


def _head(mode: str, opts: PerfOptions, partitions: int, records: int) -> dict[str, Any]:
    """The fields every mode's result starts with."""
    return {"mode": mode, "topic": opts.topic, "partitions": partitions, "records": records}


def _rates(records: int, nbytes: int, elapsed: float) -> dict[str, float]:
    elapsed = max(elapsed, 1e-9)
    return {
        "elapsed_s": round(elapsed, 3),
        "records_per_s": round(records / elapsed, 1),
        "mb_per_s": round(nbytes / elapsed / 1e6, 3),
    }


def perf_keys(count: int) -> list[bytes]:
    """``count`` distinct keys (``key-0`` ...): records spread over partitions by their hash."""
    return [b"key-%d" % i for i in range(count)]


def run_produce(opts: PerfOptions) -> dict[str, Any]:
    """Send ``records`` values, timing each from ``send`` to its acknowledgement.

    One callback, called once per record: acknowledgement time (wall clock,
    ms) minus the record's timestamp (the wall clock when ``send`` took it,
    whole ms). It is the producer extension's compiled recorder where built
    (pure Python otherwise): a Python callback, or one made per record to
    time it exactly, costs a fair part of a compiled ``send``, and the tool
    would measure itself.
    """
    from app.client import Producer
    from app.client.producer import _speedups

    partitions = ensure_topic(opts.url, opts.topic, opts.partitions)
    value = payload(opts.record_size)
    delivered = _speedups.LatencyRecorder()

    topic = opts.topic
    keys = perf_keys(opts.keys)
    with (
        Producer(opts.url, **opts.producer_config()) as producer,
        progress_bar(opts.progress, opts.records, "produce") as advance,
    ):
        # Metadata and connections first, so the first records do not pay for them.
        producer.partitions_for(topic)
        send = producer.send
        pacer = Pacer(opts.throughput)
        start = pacer.start
        sent = 0
        while sent < opts.records:
            n = min(pacer.step, opts.records - sent)
            if keys:
                nkeys = len(keys)
                for i in range(sent, sent + n):
                    send(topic, value, key=keys[i % nkeys], on_delivery=delivered)
            else:
                for _ in range(n):
                    send(topic, value, on_delivery=delivered)
            sent += n
            advance(n)
            pacer.wait(sent)
        producer.flush()
        elapsed = time.perf_counter() - start
    errors = delivered.errors
    if errors:
        raise PerfError(
            f"{len(errors)} of {opts.records} records failed; first error: {errors[0]!r}"
        )
    latencies = array("d")
    latencies.frombytes(delivered.latencies())
    stats = summarize(latencies)
    return {
        **_head("produce", opts, partitions, sent),
        "acknowledged": stats.count,
        "record_size": opts.record_size,
        "keys": opts.keys,
        "throughput_target": opts.throughput,
        **_rates(sent, sent * opts.record_size, elapsed),
        "latency_ms": stats.as_dict(),
    }


def run_consume(opts: PerfOptions) -> dict[str, Any]:
    """Read ``records`` records from the start of the topic, as fast as they decode."""
    from app.client import Consumer, TopicPartition

    partitions = ensure_topic(opts.url, opts.topic, opts.partitions)
    tps = [TopicPartition(opts.topic, p) for p in range(partitions)]
    received = 0
    nbytes = 0
    with (
        Consumer(
            opts.url, auto_offset_reset="earliest", fetch_max_wait_ms=opts.fetch_max_wait_ms
        ) as consumer,
        progress_bar(opts.progress, opts.records, "consume") as advance,
    ):
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        start = time.perf_counter()
        last_record = start
        while received < opts.records:
            # Asking for no more than is left: the count matches --records exactly.
            polled = consumer.poll_columns(timeout_ms=100, max_records=opts.records - received)
            now = time.perf_counter()
            if not polled:
                if now - last_record > opts.timeout_ms / 1000:
                    break
                continue
            last_record = now
            got = 0
            for cols in polled:
                got += len(cols)
                nbytes += sum(len(v) for v in cols.values if v is not None)
                nbytes += sum(len(k) for k in cols.keys if k is not None)
            received += got
            advance(got)
        # A stall is not part of the rate: the clock stops at the last record.
        elapsed = (last_record if received < opts.records else time.perf_counter()) - start
    result = {
        **_head("consume", opts, partitions, received),
        "bytes": nbytes,
        **_rates(received, nbytes, elapsed),
    }
    if received < opts.records:
        result["error"] = (
            f"only {received} of {opts.records} records arrived "
            f"(none for {opts.timeout_ms} ms): the topic holds fewer"
        )
    return result


def _e2e_produce(
    url: str, topic: str, total: int, record_size: int, rate: float, config: dict[str, Any]
) -> dict[str, Any]:
    """The e2e producer: ``total`` stamped values at ``rate``; answers what happened."""
    from app.client import Producer

    padding = payload(record_size - E2E_STAMP.size)
    pack = E2E_STAMP.pack
    failures: list[BaseException] = []

    def on_delivery(meta: RecordMetadata | None, exc: BaseException | None) -> None:
        if exc is not None:
            failures.append(exc)

    sent = 0
    start_ns = time.time_ns()
    try:
        with Producer(url, **config) as producer:
            # Metadata and connections first, so the first records do not pay for them.
            producer.partitions_for(topic)
            send, time_ns = producer.send, time.time_ns
            pacer = Pacer(rate)
            start_ns = time_ns()
            while sent < total:
                n = min(pacer.step, total - sent)
                for seq in range(sent, sent + n):
                    send(topic, pack(time_ns(), seq) + padding, on_delivery=on_delivery)
                sent += n
                pacer.wait(sent)
            producer.flush()
    except Exception as exc:
        failures.append(exc)
    return {
        "sent": sent,
        "start_ns": start_ns,
        "error": repr(failures[0]) if failures else None,
    }


def _e2e_child(conn: Connection, args: tuple[Any, ...]) -> None:
    try:
        conn.send(_e2e_produce(*args))
    finally:
        conn.close()


class _ProducerRun:
    """The e2e producer, in a child process (default) or a thread of this one.

    A process of its own is what a real deployment has, and it keeps the
    producer's two threads from taking the GIL from the consumer: in one
    process every socket read of the consumer waited behind the producer's
    Python, which was most of the tail latency measured.
    """

    def __init__(self, args: tuple[Any, ...], in_process: bool) -> None:
        self.result: dict[str, Any] | None = None
        self.thread: threading.Thread | None = None
        self.process: BaseProcess | None = None
        self.conn: Connection | None = None
        if in_process:

            def run() -> None:
                self.result = _e2e_produce(*args)

            self.thread = threading.Thread(target=run, name="perf-e2e-producer")
        else:
            import multiprocessing

            # spawn: a fork would copy whatever threads (progress bar) this process runs.
            ctx = multiprocessing.get_context("spawn")
            self.conn, child = ctx.Pipe(duplex=False)
            self.process = ctx.Process(
                target=_e2e_child, args=(child, args), name="perf-e2e-producer", daemon=True
            )
            self._child = child

    def start(self) -> None:
        if self.thread is not None:
            self.thread.start()
        else:
            assert self.process is not None
            self.process.start()
            self._child.close()

    def done(self) -> bool:
        if self.thread is not None:
            return not self.thread.is_alive()
        assert self.process is not None and self.conn is not None
        if self.result is None and self.conn.poll():
            self.result = self.conn.recv()
        return self.result is not None or not self.process.is_alive()

    def join(self) -> dict[str, Any]:
        if self.thread is not None:
            self.thread.join()
        else:
            assert self.process is not None and self.conn is not None
            if self.result is None:
                with contextlib.suppress(EOFError):
                    self.result = self.conn.recv()
            self.process.join(30)
            self.conn.close()
        if self.result is None:
            raise PerfError("the producer process died without a report")
        return self.result


def run_e2e(opts: PerfOptions) -> dict[str, Any]:
    """Produce at ``throughput`` while consuming; per record: receive time - send time."""
    from app.client import Consumer, TopicPartition

    if opts.record_size < E2E_STAMP.size:
        raise PerfError(f"e2e needs --record-size >= {E2E_STAMP.size} (send time and sequence)")
    partitions = ensure_topic(opts.url, opts.topic, opts.partitions)
    tps = [TopicPartition(opts.topic, p) for p in range(partitions)]
    total = opts.records
    latencies = array("d")
    seen = bytearray(total)
    duplicates = 0
    received = 0
    unpack_from = E2E_STAMP.unpack_from
    # Low linger: every millisecond a record waits for company is a millisecond of latency.
    config = opts.producer_config(default_linger_ms=0)
    producer = _ProducerRun(
        (opts.url, opts.topic, total, opts.record_size, opts.throughput, config),
        in_process=opts.e2e_same_process,
    )
    with (
        Consumer(
            opts.url, auto_offset_reset="latest", fetch_max_wait_ms=opts.fetch_max_wait_ms
        ) as consumer,
        progress_bar(opts.progress, total, "e2e") as advance,
    ):
        consumer.assign(tps)
        for tp in tps:
            consumer.position(tp)  # fixed before the first send: every record is seen
        consumer.poll_columns(timeout_ms=0)  # the fetches are out before producing starts
        producer.start()
        last_record = time.perf_counter()
        last_ns = time.time_ns()
        while received < total:
            polled = consumer.poll_columns(timeout_ms=100)
            now_ns = time.time_ns()
            now = time.perf_counter()
            if not polled:
                if producer.done() and now - last_record > opts.timeout_ms / 1000:
                    break
                continue
            last_record, last_ns = now, now_ns
            got = 0
            for cols in polled:
                for v in cols.values:
                    if v is None or len(v) < E2E_STAMP.size:
                        continue  # not one of ours (another writer on the topic)
                    sent_ns, seq = unpack_from(v)
                    if not 0 <= seq < total:
                        continue
                    if seen[seq]:
                        duplicates += 1
                        continue
                    seen[seq] = 1
                    got += 1
                    latencies.append((now_ns - sent_ns) / 1e6)
            received += got
            advance(got)
    report = producer.join()
    if report["error"]:
        raise PerfError(f"producing failed: {report['error']}")
    stats = summarize(latencies)
    return {
        **_head("e2e", opts, partitions, total),
        "sent": report["sent"],
        "received": received,
        "lost": total - received,
        "duplicates": duplicates,
        "record_size": opts.record_size,
        "throughput_target": opts.throughput,
        "producer": "thread" if opts.e2e_same_process else "process",
        **_rates(received, received * opts.record_size, (last_ns - report["start_ns"]) / 1e9),
        "latency_ms": stats.as_dict(),
    }


# ---------------------------------------------------------------- CLI


def _text_summary(result: dict[str, Any]) -> str:
    mode = result["mode"]
    verb = {"produce": "sent", "consume": "consumed", "e2e": "received"}[mode]
    line = (
        f"{result['records'] if mode != 'e2e' else result['received']:,} records {verb}, "
        f"{result['records_per_s']:,.1f} records/s ({result['mb_per_s']:,.2f} MB/s) "
        f"in {result['elapsed_s']:.2f} s"
    )
    lat = result.get("latency_ms")
    if lat:
        line += (
            f"; latency ms: avg {lat['avg']:.2f}, p50 {lat['p50']:.2f}, p95 {lat['p95']:.2f}, "
            f"p99 {lat['p99']:.2f}, p99.9 {lat['p999']:.2f}, max {lat['max']:.2f}"
        )
    if mode == "e2e":
        line += f"; lost {result['lost']}, duplicates {result['duplicates']}"
    return line


def _options(args: argparse.Namespace) -> PerfOptions:
    """A run's options: a flag named after a :class:`PerfOptions` field sets it, so an
    option's flag is declared once, in :func:`register` (one the mode lacks, --keys
    outside produce or an omitted --batch-size, keeps the field's default); the
    throughput's default depends on the mode, and progress shows on a terminal only."""
    throughput = args.throughput
    if throughput is None:
        throughput = DEFAULT_THROUGHPUT_E2E if args.perf_mode == "e2e" else -1
    flags = {f.name: getattr(args, f.name) for f in fields(PerfOptions) if hasattr(args, f.name)}
    flags["throughput"] = throughput
    flags["progress"] = not args.json and sys.stderr.isatty()
    return PerfOptions(**flags)


RUNS: dict[str, Callable[[PerfOptions], dict[str, Any]]] = {
    "produce": run_produce,
    "consume": run_consume,
    "e2e": run_e2e,
}


def cmd_perf(args: argparse.Namespace) -> int:
    from app.common.errors import LogbusError

    try:
        result = RUNS[args.perf_mode](_options(args))
    except (LogbusError, PerfError, ValueError) as exc:
        print(f"logbus: perf {args.perf_mode}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else _text_summary(result), flush=True)
    if "error" in result:
        print(f"logbus: perf {args.perf_mode}: {result['error']}", file=sys.stderr)
        return 1
    if result.get("lost") or result.get("duplicates"):
        return 1
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def register(commands: Any, client: argparse.ArgumentParser) -> None:
    """Add ``perf produce|consume|e2e`` to the ``logbus`` parser (``client`` holds ``--url``)."""
    perf = commands.add_parser(
        "perf",
        help="load-test produce, consume or end-to-end latency through the SDK",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    modes = perf.add_subparsers(dest="perf_mode", required=True, metavar="MODE")
    helps = {
        "produce": "send records as fast as allowed; latency from send to acknowledgement",
        "consume": "read records from the start of the topic",
        "e2e": "produce and consume at once; latency from send to receipt",
    }
    for mode, help_text in helps.items():
        p = modes.add_parser(mode, parents=[client], help=help_text, description=help_text)
        p.add_argument("--topic", required=True, help="created if missing (--partitions)")
        p.add_argument("--records", type=_positive, required=True, help="how many records")
        p.add_argument(
            "--record-size", type=_positive, default=100, help="value bytes (%(default)s)"
        )
        p.add_argument(
            "--throughput",
            type=float,
            help="records/s cap, -1 = unlimited (default: unlimited; e2e: "
            f"{DEFAULT_THROUGHPUT_E2E:,})",
        )
        # SUPPRESS: `logbus`'s main() checks a --batch-size it finds against 1.
        p.add_argument(
            "--batch-size",
            type=_positive,
            default=argparse.SUPPRESS,
            help="producer batch bytes (SDK default)",
        )
        p.add_argument("--linger-ms", type=float, help="producer linger (SDK default; e2e: 0)")
        p.add_argument("--acks", choices=["0", "1", "all", "-1"], default="1")
        p.add_argument(
            "--compression",
            choices=["none", "gzip", "snappy", "lz4", "zstd"],
            default="none",
        )
        p.add_argument("--partitions", type=_positive, help="for a new topic (broker default)")
        if mode == "produce":
            p.add_argument(
                "--keys",
                type=_non_negative,
                default=0,
                help="distinct record keys, key-0 ... (default 0: null keys, as Kafka's tool)",
            )
        p.add_argument(
            "--timeout-ms",
            type=int,
            default=10_000,
            help="consume/e2e: give up after this long without a record (%(default)s)",
        )
        p.add_argument(
            "--fetch-max-wait-ms",
            type=int,
            default=500,
            help="consumer long-poll wait (%(default)s)",
        )
        p.add_argument(
            "--same-process",
            dest="e2e_same_process",
            action="store_true",
            help="e2e: run the producer in a thread of this process, not a child process",
        )
        p.add_argument("--json", action="store_true", help="print one JSON object, no progress")
        p.set_defaults(handler=cmd_perf)
