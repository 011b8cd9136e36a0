"""``logbus consume``: records of a topic to stdout, one per line.

Three ways, chosen by the flags, all through the SDK: :class:`app.client.Consumer` of
assigned partitions from ``--from`` (the default), a group member through the same
Consumer (``--group``), or the WebSocket push API (:mod:`app.client.ws`, ``--ws``, with
``--group`` the socket is the member).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Iterable
from typing import BinaryIO

from app.cli.base import Api, CliError, separator, start_offset
from app.client import TopicPartition
from app.common.errors import OffsetOutOfRange


class _Printer:
    def __init__(self, out: BinaryIO, print_key: bool, sep: bytes, limit: int | None) -> None:
        self.out = out
        self.print_key = print_key
        self.sep = sep
        self.limit = limit
        self.count = 0

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
    tps = [TopicPartition(args.topic, p) for p in partitions]
    starts = {
        tp: start_offset(api, args.topic, tp.partition, args.start, args.isolation_level)
        for tp in tps
    }
    sep = (separator(args.key_separator) or "\t").encode()
    printer = _Printer(sys.stdout.buffer, args.print_key, sep, args.max_records)
    try:
        _consume_assigned(api, args, starts, printer)
    except KeyboardInterrupt:
        pass
    finally:
        print(f"Consumed {printer.count} record(s)", file=sys.stderr)
    return 0


def _consume_assigned(
    api: Api, args: argparse.Namespace, starts: dict[TopicPartition, int], printer: _Printer
) -> None:
    """The partitions of ``starts`` from those offsets through :class:`app.client.Consumer`
    (no group, nothing committed); without ``--follow`` up to the high watermarks as
    they were when it started."""
    from app.client import Consumer

    with Consumer(
        api.url,
        auto_offset_reset="none",  # an offset outside the log is an error to report
        max_partition_fetch_bytes=args.max_bytes,
        fetch_max_wait_ms=args.max_wait_ms,
        request_timeout_ms=int(api.timeout * 1000),
        auth=api.auth,
        isolation_level=args.isolation_level,
    ) as consumer:
        consumer.assign(starts)
        ends = consumer.end_offsets(list(starts))
        for tp, offset in starts.items():
            if offset > ends[tp]:
                # Past the high watermark: nothing there to print, now or (as the log
                # holds no such offset) for a long while. Say so, as a fetch there would.
                first = start_offset(api, tp.topic, tp.partition, "earliest")
                raise OffsetOutOfRange(tp.topic, tp.partition, offset, first, ends[tp])
            consumer.seek(tp, offset)
        if args.follow:
            ends = {}
        while True:
            if not args.follow and all(consumer.position(tp) >= e for tp, e in ends.items()):
                return
            records = consumer.poll(timeout_ms=1_000, max_records=printer.remaining())
            if not printer.pairs((r.key, r.value) for r in records):
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
    with Consumer(
        api.url,
        auto_offset_reset=args.start,
        auth=api.auth,
        isolation_level=args.isolation_level,
    ) as consumer:
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
    # Without --follow, stop at the high watermarks (read_committed: the last stable
    # offsets) as they were when we started.
    ends = {
        tp: start_offset(api, args.topic, tp.partition, "latest", args.isolation_level)
        for tp in tps
    }

    def caught_up() -> bool:
        return not args.follow and all(sub.positions.get(tp, 0) >= e for tp, e in ends.items())

    async with subscribe(
        api.url,
        partitions=tps,
        start=start,
        format="binary",
        auth=api.auth,
        isolation_level=args.isolation_level,
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
            ends[tp] = start_offset(api, tp.topic, tp.partition, "latest", args.isolation_level)
        return all(sub.positions.get(tp, 0) >= ends[tp] for tp in owned)

    async with subscribe(
        api.url,
        topics=[args.topic],
        group=args.group,
        default=args.start,
        format="binary",
        auth=api.auth,
        isolation_level=args.isolation_level,
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
