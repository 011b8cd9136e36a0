"""The Kafka APIs the door answers, one module per family, and the table that routes them.

Each handler is ``async (ctx, request body, version) -> response``, the response a kio
message of the request's version (built with :func:`app.kafka.encode.build`, so one body
serves every version). Families: ``cluster`` (ApiVersions, Metadata, DescribeCluster),
``records`` (Produce, Fetch, ListOffsets), ``sasl`` (SaslHandshake, SaslAuthenticate), ``groups`` (FindCoordinator and the group
APIs), ``consumer_groups`` (KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe), ``txn`` (InitProducerId, the transaction APIs, DescribeProducers), ``admin`` (topics, configs,
log dirs), ``acls`` (DescribeAcls, CreateAcls, DeleteAcls), ``quotas``
(DescribeClientQuotas, AlterClientQuotas), ``scram`` (Describe/AlterUserScramCredentials);
``base`` holds what they share.
A new API is a handler in its family's module, a line in :data:`HANDLERS` and its range
in :mod:`app.kafka.versions`.

Concurrency: handlers run on the event loop, one request of a connection at a time
(Kafka's own rule: a broker reads a connection's next request after answering the
previous one), many connections at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from app.kafka.apis.acls import create_acls, delete_acls, describe_acls
from app.kafka.apis.admin import (
    alter_configs,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_configs,
    describe_log_dirs,
    incremental_alter_configs,
)
from app.kafka.apis.base import Context
from app.kafka.apis.cluster import (
    api_versions,
    describe_cluster,
    metadata,
    unsupported_api_versions,
)
from app.kafka.apis.consumer_groups import consumer_group_describe, consumer_group_heartbeat
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
from app.kafka.apis.quotas import alter_client_quotas, describe_client_quotas
from app.kafka.apis.records import fetch, list_offsets, offset_for_leader_epoch, produce
from app.kafka.apis.sasl import sasl_authenticate, sasl_handshake
from app.kafka.apis.scram import (
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from app.kafka.apis.txn import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_producers,
    describe_transactions,
    end_txn,
    init_producer_id,
    list_transactions,
    txn_offset_commit,
)
from app.kafka.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    ALTER_CLIENT_QUOTAS,
    ALTER_CONFIGS,
    ALTER_USER_SCRAM_CREDENTIALS,
    API_VERSIONS,
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_GROUPS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_ACLS,
    DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    DESCRIBE_LOG_DIRS,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INCREMENTAL_ALTER_CONFIGS,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    LIST_OFFSETS,
    LIST_TRANSACTIONS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
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
    ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
    ADD_OFFSETS_TO_TXN: add_offsets_to_txn,
    END_TXN: end_txn,
    TXN_OFFSET_COMMIT: txn_offset_commit,
    DESCRIBE_TRANSACTIONS: describe_transactions,
    LIST_TRANSACTIONS: list_transactions,
    CREATE_TOPICS: create_topics,
    DELETE_TOPICS: delete_topics,
    DESCRIBE_CONFIGS: describe_configs,
    DESCRIBE_LOG_DIRS: describe_log_dirs,
    OFFSET_FOR_LEADER_EPOCH: offset_for_leader_epoch,
    ALTER_CONFIGS: alter_configs,
    INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs,
    DELETE_RECORDS: delete_records,
    CREATE_PARTITIONS: create_partitions,
    JOIN_GROUP: join_group,
    SYNC_GROUP: sync_group,
    HEARTBEAT: heartbeat,
    LEAVE_GROUP: leave_group,
    LIST_GROUPS: list_groups,
    DESCRIBE_GROUPS: describe_groups,
    DELETE_GROUPS: delete_groups,
    OFFSET_DELETE: offset_delete,
    SASL_HANDSHAKE: sasl_handshake,
    SASL_AUTHENTICATE: sasl_authenticate,
    DESCRIBE_ACLS: describe_acls,
    CREATE_ACLS: create_acls,
    DELETE_ACLS: delete_acls,
    CONSUMER_GROUP_HEARTBEAT: consumer_group_heartbeat,
    CONSUMER_GROUP_DESCRIBE: consumer_group_describe,
    DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
    ALTER_CLIENT_QUOTAS: alter_client_quotas,
    DESCRIBE_PRODUCERS: describe_producers,
    DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
}
