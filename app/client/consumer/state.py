"""What the consumer knows of one assigned partition, and the answer it is handing out.

A position is the offset of the next record ``poll`` hands out; the fetch
offset runs ahead of it (the end of the last answer read). Invariants:

* at most one fetch in flight (``in_flight`` is not None) and one answer
  being handed out (``fetched``) per partition;
* ``position is None`` means "look it up": ``reset`` says where
  (``earliest``/``latest``), or is None under ``auto_offset_reset="none"``;
  ``awaiting_committed``: first the group's committed offset (a partition just
  assigned); ``backoff_until`` also spaces those look-ups;
* ``asked`` is the fetch offset the request in flight was sent for; an answer
  whose ``asked`` is no longer the fetch offset, or that is marked ``stale``
  (a seek came after it was sent), is dropped unread.

Concurrency: owned by the polling thread (or the event loop); nothing here
locks.
"""

from __future__ import annotations

from typing import Any

from app.client.consumer.records import Decoded
from app.client.types import TopicPartition
from app.common.batch import BatchHeader


class Fetched:
    """One fetch answer being handed out, batch by batch.

    ``batches`` are (position in ``data``, header) of the CRC-checked batches
    to hand out; ``end`` is the offset after the answer's last batch (handed out or
    dropped by the read_committed filter): the position once all are handed out.
    ``decoded`` is the batch ``next_batch - 1`` decoded, of which ``taken`` rows
    were handed out.
    """

    __slots__ = ("batches", "data", "decoded", "end", "next_batch", "taken")

    def __init__(
        self, data: bytes | bytearray, batches: list[tuple[int, BatchHeader]], end: int
    ) -> None:
        self.data = memoryview(data)
        self.batches = batches
        self.end = end
        self.next_batch = 0
        self.decoded: Decoded = []
        self.taken = 0


class PartitionState:
    """Position, fetch offset, connection and backoff of one assigned partition."""

    __slots__ = (
        "asked",
        "awaiting_committed",
        "backoff_until",
        "conn",
        "fetch_offset",
        "fetched",
        "in_flight",
        "position",
        "redirect",
        "redirected",
        "reset",
        "stale",
        "tp",
        "url",
    )

    def __init__(self, tp: TopicPartition, reset: str | None) -> None:
        self.tp = tp
        self.position: int | None = None
        # A reset still to be looked up: "earliest" or "latest".
        self.reset: str | None = reset
        self.fetch_offset: int | None = None
        self.fetched: Fetched | None = None
        self.in_flight: Any = None  # True (blocking shell) or the task reading the answer (asyncio)
        self.asked = -1  # the fetch offset of the request in flight
        self.stale = False  # the answer in flight was asked before a seek: drop it
        self.conn: Any = None  # the shell's connection to ``url``
        self.backoff_until = 0.0
        self.url: str | None = None  # the broker ``conn`` is (or was) connected to
        # The leader a 307/421 named, for the next fetch only (None: the metadata's leader).
        self.redirect: str | None = None
        self.redirected = False  # the fetch in flight went to such a leader
        self.awaiting_committed = False

    def set_position(self, offset: int) -> None:
        self.position = offset
        self.awaiting_committed = False
        self.fetch_offset = offset
        self.reset = None
        self.fetched = None
        if self.in_flight is not None:
            self.stale = True

    def forget_position(self, reset: str | None) -> None:
        """No position any more: look it up again per ``reset``; what was read is dropped."""
        self.position = self.fetch_offset = None
        self.fetched = None
        self.reset = reset
