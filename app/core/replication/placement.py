"""Where a new topic's replicas go: Kafka's rack-unaware assignment.

Partition ``p``'s first replica (its preferred leader) is broker
``(start + p) mod n`` of the sorted live brokers, so leaders spread evenly;
the followers come after it at a shift that grows every ``n`` partitions, so
the followers of one broker's partitions spread over all the others too.
``start`` and the initial shift are random in Kafka so that many small topics
do not all lead on the first broker.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from app.common.errors import InvalidReplicationFactor


def assign_replicas(
    partitions: int,
    replication_factor: int,
    brokers: Sequence[int],
    *,
    start: int | None = None,
    shift: int | None = None,
    rng: random.Random | None = None,
) -> list[tuple[int, ...]]:
    """Replica lists per partition; raises InvalidReplicationFactor if too few brokers."""
    ids = sorted(set(brokers))
    n = len(ids)
    if replication_factor < 1:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is not possible: must be at least 1"
        )
    if replication_factor > n:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the available brokers: {n}"
        )
    rng = rng or random.Random()
    first = rng.randrange(n) if start is None else start % n
    next_shift = rng.randrange(n) if shift is None else shift % n
    out: list[tuple[int, ...]] = []
    for p in range(partitions):
        # Every n partitions (not when the leader index wraps): Kafka's rule, which keeps
        # each row of n partitions on one shift, so replicas spread evenly.
        if p > 0 and p % n == 0:
            next_shift += 1
        leader_index = (first + p) % n
        replicas = [ids[leader_index]]
        for j in range(replication_factor - 1):
            # Kafka's replicaIndex: followers at 1 + (shift + j) mod (n - 1) after the leader.
            offset = 1 + (next_shift + j) % (n - 1)
            replicas.append(ids[(leader_index + offset) % n])
        out.append(tuple(replicas))
    return out
