"""Transactions: the transaction coordinator (Kafka's KIP-98 design).

Transactional ids are hashed onto the compacted internal topic ``__transaction_state``
(Kafka's 50 partitions and hashing); the leader of an id's partition coordinates it. One
module per concept, as :mod:`app.groups`:

* :mod:`app.txn.model`: states and transitions, a transactional id's metadata, settings;
* :mod:`app.txn.records`: ``__transaction_state`` keys and values in Kafka's
  TransactionLog format;
* :mod:`app.txn.placement`: where ``__transaction_state`` and the data partitions' leaders
  are (the broker's topology, one broker or a cluster);
* :mod:`app.txn.runtime`: loading partitions, the cache, durable writes;
* :mod:`app.txn.markers`: COMMIT/ABORT markers to every partition of a transaction;
* :mod:`app.txn.coordinator`: the operations (InitProducerId, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, the produce check, describe/list) and the timeout timer.
* :mod:`app.txn.permits`: the append permits a produce path holds from its check to its
  append, which a decision waits for.

The partitions' side (transactional batches, markers, the LSO, ``.txnindex``) is in
:mod:`app.core.log`; offsets committed in a transaction in :mod:`app.groups.txn_offsets`.

In a cluster, markers for partitions led by another broker are sent to that broker
(``POST /topics/{t}/partitions/{p}/markers``, Kafka's WriteTxnMarkers, with the
inter-broker credential). Not done yet: a transactional batch whose producer this broker
does not coordinate is accepted unverified in a cluster (Kafka before KIP-890 did the
same), and so is a JSON produce inside a transaction at a partition leader that does not
coordinate the id (its caller adds the partitions at the coordinator first).
"""

from app.txn.coordinator import GroupHooks, TransactionCoordinator
from app.txn.model import TXN_TOPIC, TxnConfig, TxnMetadata, TxnState

__all__ = [
    "TXN_TOPIC",
    "GroupHooks",
    "TransactionCoordinator",
    "TxnConfig",
    "TxnMetadata",
    "TxnState",
]
