"""The SDK's exactly-once copier, for the kill -9 copier test (Kafka's system-test style).

    python tests/e2e/copier/sdk_copier.py --url URL --input IN --output OUT --group G \\
        --transactional-id TID [--max-batch 200] [--auth-username U --auth-password P |
        --auth-token T]

Loops until killed: polls IN as a member of group G (``read_committed``, no auto-commit),
and for each poll, in one transaction, produces every record's key and value unchanged
to the same partition number of OUT and commits the consumed positions to G
(``send_offsets_to_transaction``). On an abortable error it aborts and rewinds to the
group's committed positions; a producer that cannot even abort is replaced (a new
``init_transactions`` with the same id completes or aborts what is open); when another
instance fences it (``ProducerFenced``) it exits with status 3. Whatever happens to the
process or the broker, OUT read ``read_committed`` holds each input record exactly once
and G's offsets match what was copied. Prints nothing the harness needs.

After a kill -9 the dead instance stays a member of G until the broker's
``group_consumer_session_timeout_ms`` (45 s by default) expires it, and its partitions
go to the restarted instance only then: a harness that kills often wants that setting
low (a few seconds).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

# Run as a script from anywhere: the repository's root on the path, for ``logbus``.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from logbus import (
    BasicAuth,
    BearerAuth,
    Consumer,
    ConsumerRecord,
    LogbusError,
    Producer,
    TopicPartition,
)
from logbus.errors import ProducerFenced

log = logging.getLogger("sdk_copier")
FENCED_EXIT = 3
# After an error that is not the transaction's (a broker restarting): wait a little.
PAUSE_S = 0.2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--max-batch", type=int, default=200, help="records per transaction at most")
    ap.add_argument("--auth-username")
    ap.add_argument("--auth-password")
    ap.add_argument("--auth-token")
    return ap.parse_args(argv)


def auth_of(args: argparse.Namespace) -> BasicAuth | BearerAuth | None:
    if args.auth_token:
        return BearerAuth(args.auth_token)
    if args.auth_username:
        return BasicAuth(args.auth_username, args.auth_password or "")
    return None


class Copier:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.auth = auth_of(args)
        self.consumer = Consumer(
            args.url,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            max_poll_records=args.max_batch,
            auth=self.auth,
        )
        self.consumer.subscribe([args.input], group_id=args.group, enable_auto_commit=False)
        self.producer = self.new_producer()

    def new_producer(self) -> Producer:
        """A transactional producer, initialized: this fences every older instance of the
        id and completes or aborts the transaction it left open. Retried until it works
        (the broker may be restarting), except when fenced."""
        while True:
            producer = Producer(
                self.args.url, transactional_id=self.args.transactional_id, auth=self.auth
            )
            try:
                producer.init_transactions()
                return producer
            except ProducerFenced:
                raise
            except LogbusError as exc:
                log.warning("init_transactions failed (%s); again", exc)
                producer.close(timeout=1)
                time.sleep(PAUSE_S)

    def rewind(self) -> None:
        """Back to the group's committed positions: what an aborted transaction consumed is
        read again."""
        assigned = self.consumer.assignment()
        if not assigned:
            return
        for tp, offset in self.consumer.committed(assigned).items():
            if offset is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, offset)

    def copy(self, records: list[ConsumerRecord]) -> None:
        """One transaction: the records to the same partitions of the output, and the
        positions after them to the group."""
        p = self.producer
        p.begin_transaction()
        for r in records:
            p.send(self.args.output, r.value, key=r.key, partition=r.partition)
        positions = {TopicPartition(r.topic, r.partition): r.offset + 1 for r in records}
        p.send_offsets_to_transaction(positions, self.consumer.group_metadata())
        p.commit_transaction()

    def recover(self, error: LogbusError) -> None:
        """An abortable error: abort (or, if even that fails, replace the producer), then
        read again from the committed positions."""
        log.warning("transaction failed (%s); aborting", error)
        try:
            self.producer.abort_transaction()
        except ProducerFenced:
            raise
        except LogbusError as exc:
            log.warning("abort failed (%s); a new producer takes over the id", exc)
            self.producer.close(timeout=1)
            self.producer = self.new_producer()
        while True:
            try:
                self.rewind()
                return
            except LogbusError as exc:
                log.warning("rewind failed (%s); again", exc)
                time.sleep(PAUSE_S)

    def run(self) -> None:
        while True:
            try:
                records = self.consumer.poll(timeout_ms=500)
            except LogbusError as exc:  # a broker restarting, a rebalance: nothing begun
                log.warning("poll failed (%s)", exc)
                time.sleep(PAUSE_S)
                continue
            if not records:
                continue
            try:
                self.copy(records)
            except ProducerFenced:
                raise
            except LogbusError as exc:
                self.recover(exc)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    copier = Copier(parse_args(argv))
    try:
        copier.run()
    except ProducerFenced as exc:
        log.warning("fenced by a newer instance: %s", exc)
        return FENCED_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main())
