"""Producer ids for idempotent producers (Kafka's InitProducerId), unique per data dir.

File ``<data-dir>/producer-id-block``, JSON written atomically (tmp, fsync,
rename, directory fsync)::

    {"version": 1, "next_block_start": 2000}

Ids are handed out from blocks of ``block_size`` (1000). Before the first id
of a block is handed out, the file is moved past the block, so after any
crash or restart allocation resumes at a block no one has seen: an id is
never handed out twice. The rest of a block that was in use at a stop is
skipped (ids are 64-bit; skipping costs nothing).

In cluster mode blocks come from ZooKeeper instead (:meth:`use_cluster_blocks`,
Kafka's ``/latest_producer_id_block``): a compare-and-set moves the cluster-wide
counter past the block, so no two brokers hand out the same id, and a producer
keeps its id when it moves to another partition leader.

Concurrency: thread-safe (one lock; the file is written under it, once per
block).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Protocol

from app.common.errors import InvalidRequest, KafkaStorageError, UnknownProducerId
from app.core.log.checkpoint import write_atomically

__all__ = ["BLOCK_SIZE", "MAX_EPOCH", "PRODUCER_ID_BLOCK_FILE", "ProducerIdManager"]

PRODUCER_ID_BLOCK_FILE = "producer-id-block"
BLOCK_SIZE = 1000
MAX_EPOCH = (1 << 15) - 1  # producerEpoch is an int16 in the batch header
_VERSION = 1


class ProducerIdBlocks(Protocol):
    """A cluster-wide source of producer id blocks."""

    def allocate(self, block_size: int) -> int:
        """Reserve ``block_size`` ids no one else gets; the first of them."""
        ...

    def issued_below(self) -> int:
        """Every id any broker handed out is below this."""
        ...


class ProducerIdManager:
    """Allocates producer ids from persisted blocks and bumps epochs; see the module docstring."""

    def __init__(self, path: Path, *, block_size: int = BLOCK_SIZE) -> None:
        self.path = path
        self.block_size = block_size
        self._lock = threading.Lock()
        self._next = 0
        self._block_end = 0  # == the persisted next_block_start once a block is taken
        self._loaded = False
        self._cluster: ProducerIdBlocks | None = None

    def use_cluster_blocks(self, blocks: ProducerIdBlocks) -> None:
        """From now on take blocks from ``blocks`` (cluster mode), not the local file."""
        with self._lock:
            self._cluster = blocks
            self._next = self._block_end = 0

    def load(self) -> None:
        """Read the persisted block counter (a missing file means no id was ever handed out).

        A damaged file raises :class:`KafkaStorageError`: guessing could reuse ids.
        """
        with self._lock:
            start = 0
            if self.path.exists():
                try:
                    meta = json.loads(self.path.read_text())
                    start = int(meta["next_block_start"])
                    if meta.get("version") != _VERSION or start < 0:
                        raise ValueError(f"unsupported content {meta!r}")
                except (ValueError, KeyError, TypeError) as e:
                    raise KafkaStorageError(f"{self.path} is damaged: {e}") from e
            self._next = self._block_end = start
            self._loaded = True

    @property
    def issued_below(self) -> int:
        """Every id handed out so far (now or before a restart; by any broker in a cluster)
        is below this."""
        if self._cluster is not None:
            return self._cluster.issued_below()
        return self._block_end

    def next_id(self) -> int:
        with self._lock:
            if not self._loaded:
                raise KafkaStorageError("the producer id allocator is not loaded")
            if self._next >= self._block_end and self._cluster is not None:
                self._next = self._cluster.allocate(self.block_size)
                self._block_end = self._next + self.block_size
            elif self._next >= self._block_end:
                end = self._next + self.block_size
                # Persist first: a crash after this point skips the block, never reuses it.
                data = {"version": _VERSION, "next_block_start": end}
                write_atomically(self.path, json.dumps(data).encode() + b"\n")
                self._block_end = end
            pid = self._next
            self._next += 1
            return pid

    def init_producer(
        self, producer_id: int | None = None, producer_epoch: int | None = None
    ) -> tuple[int, int]:
        """``(producer id, epoch)``: a new id with epoch 0, or the given id with its epoch bumped.

        Raises :class:`InvalidRequest` for half or out-of-range arguments and
        :class:`UnknownProducerId` for an id this data dir never handed out.
        There is no broker-wide epoch registry: fencing is per partition
        (the batches' epochs), and one id belongs to one producer.
        """
        if producer_id is None and producer_epoch is None:
            return self.next_id(), 0
        if producer_id is None or producer_epoch is None:
            raise InvalidRequest("producer_id and producer_epoch go together: give both or neither")
        if not 0 <= producer_epoch <= MAX_EPOCH:
            raise InvalidRequest(f"producer_epoch must be 0 to {MAX_EPOCH}, got {producer_epoch}")
        if not 0 <= producer_id < self.issued_below:
            raise UnknownProducerId(producer_id)
        if producer_epoch == MAX_EPOCH:
            # As Kafka: an exhausted epoch gets a fresh id rather than wrapping.
            return self.next_id(), 0
        return producer_id, producer_epoch + 1
