"""``partition.metadata``: the topic id kept in each partition directory (Kafka's
``PartitionMetadataFile``).

Format (text, Kafka's)::

    version: 0
    topic_id: <the topic id, Kafka's base64 text form>

Written once, atomically (temporary file, fsync, rename), when a partition directory is
made or first opened with an id; never rewritten. Read back to recover a topic's id when
its topic file has none (a topic from before ids were kept, or a restored topic file).
Concurrency: callers hold the log manager's lock.
"""

from __future__ import annotations

import uuid
from base64 import urlsafe_b64encode
from pathlib import Path

from app.core.log.checkpoint import write_atomically

PARTITION_METADATA = "partition.metadata"


def write_topic_id(directory: Path, topic_id: str) -> None:
    """Write ``topic_id`` into ``directory`` unless a file is there already (or no id)."""
    path = directory / PARTITION_METADATA
    if topic_id and not path.exists():
        write_atomically(path, f"version: 0\ntopic_id: {topic_id}\n".encode())


def read_topic_id(directory: Path) -> str:
    """The topic id in ``directory``'s file; "" when there is none or it names none."""
    try:
        text = (directory / PARTITION_METADATA).read_text()
    except (OSError, UnicodeDecodeError):
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            return value.strip()
    return ""


def legacy_topic_id(data_dir: Path, topic: str, partitions: int) -> str:
    """An id for a topic whose topic file has none: the one a partition directory's file
    already holds (a topic file restored from before), else a new one (as Kafka gives ids
    to topics from before ids were kept)."""
    for p in range(partitions):
        found = read_topic_id(data_dir / f"{topic}-{p}")
        if found:
            return found
    return new_kafka_id()


def new_kafka_id() -> str:
    """A new random Kafka Uuid in its text form (url-safe base64, no padding): a topic id
    (KIP-516), a cluster id."""
    return urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
