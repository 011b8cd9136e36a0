"""``logbus consume``: records of a topic to stdout, one per line.

Three ways, chosen by the flags: plain JSON fetches of each partition (long polls with
``--follow``, one thread per partition), a group member through
:class:`app.client.Consumer` (``--group``), or the WebSocket push API
(:mod:`app.client.ws`, ``--ws``, with ``--group`` the socket is the member).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, BinaryIO

from app.cli.base import Api, CliError, separator, start_offset
from app.client import TopicPartition
from app.client._http import topic_path


def _decode(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def fetch_partition(
    api: Api,
    topic: str,
    partition: int,
    offset: int,
    *,
    follow: bool,
    max_bytes: int,
    max_wait_ms: int,
    stop: threading.Event,
    emit: Callable[[list[dict[str, Any]]], bool],
) -> None:
    """Fetch from ``offset`` and hand each batch of records to ``emit`` until caught up
    (or forever with ``follow``); ``emit`` returns False to stop."""
    path = f"{topic_path(topic)}/partitions/{partition}/records"
    params: dict[str, str | int] = {
        "max_bytes": max_bytes,
        "max_wait_ms": max_wait_ms if follow else 0,
        "key_format": "binary",
        "value_format": "binary",
    }
    while not stop.is_set():
        params["offset"] = offset
        answer = api.json("GET", path, params)
        records = answer.get("records", [])
        next_offset = int(answer.get("next_offset", offset))
        if records and not emit(records):
            return
        caught_up = next_offset >= int(answer.get("high_watermark", next_offset))
        if not follow and (caught_up or next_offset == offset):
            return
        offset = next_offset


class _Printer:
    def __init__(self, out: BinaryIO, print_key: bool, sep: bytes, limit: int | None) -> None:
        self.out = out
        self.print_key = print_key
        self.sep = sep
        self.limit = limit
        self.count = 0

    def __call__(self, records: list[dict[str, Any]]) -> bool:
        return self.pairs((_decode(r.get("key")), _decode(r.get("value"))) for r in records)

    def pairs(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> bool:
        """Print (key, value) pairs; False once the limit is reached."""
        parts: list[bytes] = []
        for key, value in records:
            if self.limit is not None and self.count >= self.limit:
                break
            if self.print_key:
                parts += [b"null" if key is None else key, self.sep]
            parts += [b"null" if value is None else value, b"\n"]
            self.count += 1
        self.out.write(b"".join(parts))
        self.out.flush()
        return self.limit is None or self.count < self.limit

    def remaining(self) -> int | None:
        return None if self.limit is None else self.limit - self.count


def cmd_consume(api: Api, args: argparse.Namespace) -> int:
    if args.group is not None or args.ws:
        return _consume_with_sdk(api, args)
    if args.partition is not None:
        partitions = [args.partition]
    else:
        partitions = [p.partition for p in api.admin.describe_topic(args.topic).partitions]
    starts = {p: start_offset(api, args.topic, p, args.start) for p in partitions}
    sep = (separator(args.key_separator) or "\t").encode()
    printer = _Printer(sys.stdout.buffer, args.print_key, sep, args.max_records)
    stop = threading.Event()
    options: dict[str, Any] = {
        "follow": args.follow,
        "max_bytes": args.max_bytes,
        "max_wait_ms": args.max_wait_ms,
        "stop": stop,
    }
    try:
        if len(partitions) == 1 or not args.follow:
            for p in partitions:
                if printer.limit is not None and printer.count >= printer.limit:
                    break
                fetch_partition(api, args.topic, p, starts[p], emit=printer, **options)
        else:
            _follow_many(api, args.topic, starts, printer, options, stop)
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        print(f"Consumed {printer.count} record(s)", file=sys.stderr)
    return 0


def _follow_many(
    api: Api,
    topic: str,
    starts: dict[int, int],
    printer: _Printer,
    options: dict[str, Any],
    stop: threading.Event,
) -> None:
    """Long-poll every partition at once (one thread each); print from the main thread."""
    inbox: queue.Queue[list[dict[str, Any]] | BaseException] = queue.Queue(maxsize=64)

    def worker(partition: int, offset: int) -> None:
        # One client per thread: the SDK's clients are not shared between threads.
        own = Api(api.url, timeout=api.timeout)

        def forward(records: list[dict[str, Any]]) -> bool:
            inbox.put(records)
            return True

        try:
            fetch_partition(own, topic, partition, offset, emit=forward, **options)
        except BaseException as exc:
            inbox.put(exc)
        finally:
            own.close()

    for partition, offset in starts.items():
        threading.Thread(target=worker, args=(partition, offset), daemon=True).start()
    while True:
        item = inbox.get()
        if isinstance(item, BaseException):
            raise item
        if not printer(item):
            return


def _consume_with_sdk(api: Api, args: argparse.Namespace) -> int:
    """``--group`` (Consumer.subscribe, commits as it goes) or ``--ws`` (app.client.ws)."""
    if args.group is not None and (args.partition is not None or args.start.isdigit()):
        raise CliError("--group takes its partitions and offsets from the group", 2)
    sep = (separator(args.key_separator) or "\t").encode()
    printer = _Printer(sys.stdout.buffer, args.print_key, sep, args.max_records)
    try:
        if args.group is not None and args.ws:
            asyncio.run(_consume_ws_group(api, args, printer))
        elif args.group is not None:
            _consume_group(api, args, printer)
        else:
            asyncio.run(_consume_ws(api, args, printer))
    except KeyboardInterrupt:
        pass
    finally:
        print(f"Consumed {printer.count} record(s)", file=sys.stderr)
    return 0


# Without --follow, a member that is given no partition (more members than partitions)
# gives up after this long.
GROUP_IDLE_SECONDS = 10.0


def _consume_group(api: Api, args: argparse.Namespace, printer: _Printer) -> None:
    from app.client import Consumer

    if args.start not in ("earliest", "latest"):
        raise CliError(f"--from expects earliest or latest with --group, got {args.start!r}", 2)
    with Consumer(api.url, auto_offset_reset=args.start, auth=api.auth) as consumer:
        consumer.subscribe([args.topic], group_id=args.group)
        idle_until = time.monotonic() + GROUP_IDLE_SECONDS
        while True:
            # Never take more than will be printed: what is taken is what gets committed.
            records = consumer.poll(timeout_ms=200, max_records=printer.remaining())
            if not printer.pairs((r.key, r.value) for r in records):
                return
            if args.follow:
                continue
            owned = consumer.assignment()
            if owned:
                ends = consumer.end_offsets(owned)
                if all(consumer.position(tp) >= end for tp, end in ends.items()):
                    return
            elif time.monotonic() >= idle_until:
                return


async def _consume_ws(api: Api, args: argparse.Namespace, printer: _Printer) -> None:
    from app.client.ws import subscribe

    if args.partition is not None:
        partitions = [args.partition]
    else:
        partitions = [p.partition for p in api.admin.describe_topic(args.topic).partitions]
    tps = [TopicPartition(args.topic, p) for p in partitions]
    start: str | int = args.start
    if args.start not in ("earliest", "latest"):
        start = start_offset(api, args.topic, partitions[0], args.start)
    # Without --follow, stop at the high watermarks as they were when we started.
    ends = {tp: start_offset(api, args.topic, tp.partition, "latest") for tp in tps}

    def caught_up() -> bool:
        return not args.follow and all(sub.positions.get(tp, 0) >= e for tp, e in ends.items())

    async with subscribe(
        api.url, partitions=tps, start=start, format="binary", auth=api.auth
    ) as sub:
        if caught_up():
            return
        async for record in sub:
            if not printer.pairs([(record.key, record.value)]) or caught_up():
                return


async def _consume_ws_group(api: Api, args: argparse.Namespace, printer: _Printer) -> None:
    """The socket is the group member; what was printed is committed every second and at
    the end."""
    from app.client.ws import subscribe

    if args.start not in ("earliest", "latest"):
        raise CliError(f"--from expects earliest or latest with --group, got {args.start!r}", 2)
    ends: dict[TopicPartition, int] = {}

    def caught_up(owned: set[TopicPartition]) -> bool:
        for tp in owned - ends.keys():
            ends[tp] = start_offset(api, tp.topic, tp.partition, "latest")
        return all(sub.positions.get(tp, 0) >= ends[tp] for tp in owned)

    async with subscribe(
        api.url,
        topics=[args.topic],
        group=args.group,
        default=args.start,
        format="binary",
        auth=api.auth,
    ) as sub:
        idle_until = time.monotonic() + GROUP_IDLE_SECONDS
        next_commit = time.monotonic() + 1.0
        try:
            while True:
                owned = sub.assignment or set()
                if not args.follow and (
                    caught_up(owned) if owned else time.monotonic() >= idle_until
                ):
                    return
                try:
                    # Short steps: the loop must look at the assignment while idle.
                    record = await asyncio.wait_for(anext(sub), 0.2)
                except TimeoutError:
                    continue
                if not printer.pairs([(record.key, record.value)]):
                    return
                if time.monotonic() >= next_commit:
                    await sub.commit()
                    next_commit = time.monotonic() + 1.0
        finally:
            await sub.commit()
