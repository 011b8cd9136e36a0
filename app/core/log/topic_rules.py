"""Topic names and partition counts: Kafka's rules, bounded by what a file name holds.

A topic's name becomes file names (``topics/<topic>.json``, ``<topic>-<p>/``), so its
length is bounded by the filesystem's NAME_MAX less the longest suffix the log manager
adds; the rules themselves are Kafka's (``[a-zA-Z0-9._-]``, not ``.`` or ``..``, and
no two topics that differ only by ``.`` versus ``_``). Pure functions, no I/O: the log
manager, the replica manager and the HTTP models all check names through this module.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping

from app.common.errors import InvalidPartitions, InvalidTopic
from app.core.log.config import LogConfig

DELETE_DIR_SUFFIX = "-delete"
MAX_PARTITIONS = 10_000
# Linux's (and most filesystems') limit on one file name, in bytes (topic names are ASCII).
NAME_MAX = 255
# The longest name a topic puts in a file name: ``topics/<topic>.json.tmp`` while its
# metadata is written, ``<topic>-9999`` for its last possible partition. Deletion
# renames partition dirs to ``<topic>-<p>.<uuid>-delete``, which could be longer: that
# name cuts the topic short instead (see _delete_dir_name), as Kafka does. Kafka's 249
# is the same computation for its own file names.
MAX_TOPIC_NAME_LENGTH = NAME_MAX - max(len(".json.tmp"), len(f"-{MAX_PARTITIONS - 1}"))

# A topic's new config overrides: the set itself (AlterConfigs), or made from the current
# overrides (IncrementalAlterConfigs), which the topology reads where they are kept (a
# lone broker's topic file under its lock, a cluster's ZooKeeper assignment inside its
# compare-and-set), never from a view that may lag behind another broker's change.
ConfigChange = Mapping[str, object] | Callable[[Mapping[str, object]], Mapping[str, object]]


def changed_overrides(change: ConfigChange, current: Mapping[str, object]) -> Mapping[str, object]:
    """The overrides ``change`` asks for, given the topic's ``current`` ones."""
    return change(current) if callable(change) else change


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: str) -> None:
    """Kafka's rules with our file-name limit: 1..MAX_TOPIC_NAME_LENGTH (246) of
    ``[a-zA-Z0-9._-]``, not ``.`` or ``..``; raises InvalidTopic."""
    if not name:
        raise InvalidTopic(name, "the name is empty")
    if name in (".", ".."):
        raise InvalidTopic(name, "'.' and '..' are not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopic(name, f"longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(name, "only ASCII letters, digits, '.', '_' and '-' are allowed")


def check_new_topic(
    name: str, partitions: int, overrides: Mapping[str, object], defaults: LogConfig
) -> tuple[LogConfig, dict[str, object]]:
    """Check a topic to create; its effective config and its overrides as parsed values.

    Raises InvalidTopic, InvalidPartitions or InvalidConfig.
    """
    validate_topic_name(name)
    if (
        isinstance(partitions, bool)
        or not isinstance(partitions, int)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise InvalidPartitions(
            f"a topic needs 1 to {MAX_PARTITIONS} partitions, not {partitions!r}"
        )
    config = defaults.with_overrides(overrides)
    names = LogConfig.kafka_names()
    return config, {k: getattr(config, names[k]) for k in overrides}


def delete_dir_name(partition_dir: str) -> str:
    """``<topic>-<p>.<uuid>-delete``, the topic cut short to fit NAME_MAX: the name only
    has to be unique and recognisable as a deletion (the suffix), not to be parsed."""
    suffix = f".{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return partition_dir[: NAME_MAX - len(suffix)] + suffix


def collision_key(name: str) -> str:
    # Kafka refuses topics that differ only by '.' versus '_' (they clash in metric names).
    return name.replace(".", "_")
