"""The segment-log engine: record batches on disk, indexed, recovered, retained.

No web framework in here; ``app.api`` calls :class:`LogManager` and
:class:`Log` and maps :mod:`app.common.errors` to HTTP answers.
"""

from app.core.log.checkpoint import OffsetCheckpointFile
from app.core.log.config import LogConfig
from app.core.log.epoch import LeaderEpochCache
from app.core.log.index import OffsetIndex, TimeIndex
from app.core.log.log import AppendInfo, AppendListener, FetchInfo, FileSlice, Log
from app.core.log.manager import LogManager
from app.core.log.segment import LogSegment
from app.core.log.topic_rules import validate_topic_name

__all__ = [
    "AppendInfo",
    "AppendListener",
    "FetchInfo",
    "FileSlice",
    "LeaderEpochCache",
    "Log",
    "LogConfig",
    "LogManager",
    "LogSegment",
    "OffsetCheckpointFile",
    "OffsetIndex",
    "TimeIndex",
    "validate_topic_name",
]
