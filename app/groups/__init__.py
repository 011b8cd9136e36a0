"""Consumer groups: the coordinator, server-side assignment and committed offsets.

Modelled on Kafka's next-generation consumer protocol (KIP-848): members
heartbeat, the broker computes the target assignment and hands it out
incrementally. State lives in memory and in the compacted internal topic
``__consumer_offsets``. No web framework in here; ``app.api`` maps requests
to :class:`GroupCoordinator` calls.
"""

from app.groups.coordinator import GroupConfig, GroupCoordinator, HeartbeatRequest
from app.groups.hashing import java_string_hashcode, partition_for

__all__ = [
    "GroupConfig",
    "GroupCoordinator",
    "HeartbeatRequest",
    "java_string_hashcode",
    "partition_for",
]
