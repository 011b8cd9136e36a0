"""The Kafka APIs the door serves and their version ranges, as ApiVersions advertises them.

Each range is honest: every version in it is decoded, handled and answered with the
fields it defines (the README's "Kafka clients" table is this dict). Minimums are as old
as kio defines the message (Kafka 4.0's floor: Produce v3, Fetch v4, ListOffsets v1,
RecordBatch v2 only), which every maintained client negotiates; librdkafka decides from
the Produce range whether it may send compressed RecordBatch v2 (v3+), so v3 is what it
must see.

Topic ids (KIP-516) come from the topology (:meth:`Topology.topic_id`), so the versions
that carry them are served: Metadata v10+ answers each topic's id and v12 looks topics up
by id; Fetch v13+ names topics by id, v16 adds KIP-951's leader endpoints, and v15, v17
and v18 add only follower fields (read and ignored: the door serves consumers; followers
replicate over HTTP); DeleteTopics v6 deletes by id; KIP-848's ConsumerGroupHeartbeat and
ConsumerGroupDescribe name topics by id. OffsetCommit v9 is v8's message with KIP-848's
member epochs, which the coordinator checks for consumer-protocol members at every
version (STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH), and v10 names topics by id; OffsetFetch
v8+ asks for several groups, v9 with a member's id and epoch, v10 topics by id.

Maximums stop before versions that need what the broker does not do yet: Produce v10
carries KIP-951's leader hint, served from the topology, v11+ KIP-890's
TRANSACTION_ABORTABLE; ListOffsets v8+ asks for tiered-storage offsets; Metadata v13 adds
a top-level error code (KIP-1102's REBOOTSTRAP_REQUIRED); FindCoordinator v4+ batches
several keys. The classic group APIs are served over every version kio defines (JoinGroup 0-9 with
KIP-394's MEMBER_ID_REQUIRED from v4 and v9's skip_assignment for a static leader;
LeaveGroup's batches from v3).
"""

from __future__ import annotations

from typing import Final

PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
DESCRIBE_CLUSTER: Final = 60
API_VERSIONS: Final = 18
INIT_PRODUCER_ID: Final = 22
ADD_PARTITIONS_TO_TXN: Final = 24
ADD_OFFSETS_TO_TXN: Final = 25
END_TXN: Final = 26
TXN_OFFSET_COMMIT: Final = 28
DESCRIBE_TRANSACTIONS: Final = 65
LIST_TRANSACTIONS: Final = 66
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
DESCRIBE_CONFIGS: Final = 32
DESCRIBE_LOG_DIRS: Final = 35
OFFSET_FOR_LEADER_EPOCH: Final = 23
ALTER_CONFIGS: Final = 33
INCREMENTAL_ALTER_CONFIGS: Final = 44
DELETE_RECORDS: Final = 21
CREATE_PARTITIONS: Final = 37
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
DELETE_GROUPS: Final = 42
OFFSET_DELETE: Final = 47
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
CONSUMER_GROUP_HEARTBEAT: Final = 68
CONSUMER_GROUP_DESCRIBE: Final = 69
DESCRIBE_CLIENT_QUOTAS: Final = 48
ALTER_CLIENT_QUOTAS: Final = 49
DESCRIBE_PRODUCERS: Final = 61
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51

# api key -> (min version, max version)
SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    PRODUCE: (3, 10),
    FETCH: (4, 18),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    API_VERSIONS: (0, 3),
    INIT_PRODUCER_ID: (0, 4),
    OFFSET_COMMIT: (2, 10),
    OFFSET_FETCH: (1, 10),
    FIND_COORDINATOR: (0, 3),
    DESCRIBE_CLUSTER: (0, 1),
    # Transactions: client versions only. AddPartitionsToTxn v4+ is KIP-890's
    # broker-to-broker batch; v4+ of AddOffsetsToTxn, EndTxn and TxnOffsetCommit add
    # KIP-890's TRANSACTION_ABORTABLE (EndTxn v5 and TxnOffsetCommit v5 its epoch bump per
    # transaction), which the coordinator does not do; ListTransactions v2 filters by a
    # transactional-id pattern (KIP-1152), not served.
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 3),
    TXN_OFFSET_COMMIT: (0, 3),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
    # Admin: Kafka 4.0's minimums. DeleteTopics v6 names a topic by name or by id (the
    # topology's topic ids); DescribeLogDirs v5 reports cordoned directories (KIP-1066),
    # not served.
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DESCRIBE_CONFIGS: (1, 4),
    DESCRIBE_LOG_DIRS: (1, 4),
    # v2 (Kafka 4.0's floor) adds current_leader_epoch, v3 replica_id; v4 is flexible.
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ALTER_CONFIGS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    DELETE_RECORDS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    DELETE_GROUPS: (0, 2),
    OFFSET_DELETE: (0, 0),
    # v0 handshakes are followed by raw SASL tokens (no SaslAuthenticate), v1 by
    # SaslAuthenticate; SaslAuthenticate v1 adds session_lifetime (0: no re-authentication,
    # KIP-368 not served), v2 is flexible.
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 2),
    # ACLs: Kafka 4.0's floor (v1, with pattern types); v2 is flexible, v3 adds the USER
    # resource type (answered as a type Logbus keeps no ACLs for).
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    # KIP-848's consumer group protocol on the coordinator's server-side assignment
    # (app/kafka/apis/consumer_groups.py); v1 members make their own ids (KIP-1082) and
    # may subscribe by regex; ConsumerGroupDescribe v1 adds member_type.
    CONSUMER_GROUP_HEARTBEAT: (0, 1),
    CONSUMER_GROUP_DESCRIBE: (0, 1),
    # Client quotas (app/kafka/apis/quotas.py): every version kio defines (v1 is flexible).
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ALTER_CLIENT_QUOTAS: (0, 1),
    # The leader log's producer state, per partition (app/kafka/apis/txn.py).
    DESCRIBE_PRODUCERS: (0, 0),
    # The users file's SCRAM credentials (app/kafka/apis/scram.py).
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

NAMES: Final[dict[int, str]] = {
    PRODUCE: "Produce",
    FETCH: "Fetch",
    LIST_OFFSETS: "ListOffsets",
    METADATA: "Metadata",
    API_VERSIONS: "ApiVersions",
    INIT_PRODUCER_ID: "InitProducerId",
    OFFSET_COMMIT: "OffsetCommit",
    OFFSET_FETCH: "OffsetFetch",
    FIND_COORDINATOR: "FindCoordinator",
    DESCRIBE_CLUSTER: "DescribeCluster",
    ADD_PARTITIONS_TO_TXN: "AddPartitionsToTxn",
    ADD_OFFSETS_TO_TXN: "AddOffsetsToTxn",
    END_TXN: "EndTxn",
    TXN_OFFSET_COMMIT: "TxnOffsetCommit",
    DESCRIBE_TRANSACTIONS: "DescribeTransactions",
    LIST_TRANSACTIONS: "ListTransactions",
    CREATE_TOPICS: "CreateTopics",
    DELETE_TOPICS: "DeleteTopics",
    DESCRIBE_CONFIGS: "DescribeConfigs",
    DESCRIBE_LOG_DIRS: "DescribeLogDirs",
    OFFSET_FOR_LEADER_EPOCH: "OffsetForLeaderEpoch",
    ALTER_CONFIGS: "AlterConfigs",
    INCREMENTAL_ALTER_CONFIGS: "IncrementalAlterConfigs",
    DELETE_RECORDS: "DeleteRecords",
    CREATE_PARTITIONS: "CreatePartitions",
    JOIN_GROUP: "JoinGroup",
    HEARTBEAT: "Heartbeat",
    LEAVE_GROUP: "LeaveGroup",
    SYNC_GROUP: "SyncGroup",
    DESCRIBE_GROUPS: "DescribeGroups",
    LIST_GROUPS: "ListGroups",
    DELETE_GROUPS: "DeleteGroups",
    OFFSET_DELETE: "OffsetDelete",
    SASL_HANDSHAKE: "SaslHandshake",
    SASL_AUTHENTICATE: "SaslAuthenticate",
    DESCRIBE_ACLS: "DescribeAcls",
    CREATE_ACLS: "CreateAcls",
    DELETE_ACLS: "DeleteAcls",
    CONSUMER_GROUP_HEARTBEAT: "ConsumerGroupHeartbeat",
    CONSUMER_GROUP_DESCRIBE: "ConsumerGroupDescribe",
    DESCRIBE_CLIENT_QUOTAS: "DescribeClientQuotas",
    ALTER_CLIENT_QUOTAS: "AlterClientQuotas",
    DESCRIBE_PRODUCERS: "DescribeProducers",
    DESCRIBE_USER_SCRAM_CREDENTIALS: "DescribeUserScramCredentials",
    ALTER_USER_SCRAM_CREDENTIALS: "AlterUserScramCredentials",
}
