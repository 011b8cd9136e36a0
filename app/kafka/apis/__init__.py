"""The Kafka APIs the door answers, one module per family, and the table that routes them.

Each handler is ``async (ctx, request body, version) -> response``, the response a kio
message of the request's version (built with :func:`app.kafka.encode.build`, so one body
serves every version). Families: ``cluster`` (ApiVersions, Metadata, DescribeCluster),
``records`` (Produce, Fetch, ListOffsets), ``groups`` (FindCoordinator and the group
APIs), ``txn`` (InitProducerId and the transaction APIs); ``base`` holds what they share.
A new API is a handler in its family's module, a line in :data:`HANDLERS` and its range
in :mod:`app.kafka.versions`.

Concurrency: handlers run on the event loop, one request of a connection at a time
(Kafka's own rule: a broker reads a connection's next request after answering the
previous one), many connections at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from app.kafka.apis.base import Context
from app.kafka.apis.cluster import (
    api_versions,
    describe_cluster,
    metadata,
    unsupported_api_versions,
)
from app.kafka.apis.groups import (
    delete_groups,
    describe_groups,
    find_coordinator,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)
from app.kafka.apis.records import fetch, list_offsets, produce
from app.kafka.apis.txn import init_producer_id
from app.kafka.versions import (
    API_VERSIONS,
    DELETE_GROUPS,
    DESCRIBE_CLUSTER,
    DESCRIBE_GROUPS,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    PRODUCE,
    SYNC_GROUP,
)

__all__ = ["HANDLERS", "Context", "Handler", "unsupported_api_versions"]

Handler = Callable[[Context, Any, int], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {
    API_VERSIONS: api_versions,
    METADATA: metadata,
    DESCRIBE_CLUSTER: describe_cluster,
    PRODUCE: produce,
    FETCH: fetch,
    LIST_OFFSETS: list_offsets,
    INIT_PRODUCER_ID: init_producer_id,
    FIND_COORDINATOR: find_coordinator,
    OFFSET_COMMIT: offset_commit,
    OFFSET_FETCH: offset_fetch,
    JOIN_GROUP: join_group,
    SYNC_GROUP: sync_group,
    HEARTBEAT: heartbeat,
    LEAVE_GROUP: leave_group,
    LIST_GROUPS: list_groups,
    DESCRIBE_GROUPS: describe_groups,
    DELETE_GROUPS: delete_groups,
    OFFSET_DELETE: offset_delete,
}
