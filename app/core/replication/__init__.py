"""Cluster mode: partitions replicated across brokers, coordinated through ZooKeeper.

- :mod:`.state`       the records kept in ZooKeeper (topic assignment, partition state)
- :mod:`.zk`          the ZooKeeper store: paths, JSON, compare-and-set writes, watches
- :mod:`.placement`   which brokers hold each partition's replicas
- :mod:`.controller`  the one broker that elects leaders and fixes the ISR after failures
- :mod:`.partition`   one partition's replica on this broker: leader or follower, ISR, HW
- :mod:`.rwlock`      the readers-writer lock appends and leadership changes meet in
- :mod:`.faults`      test-only fault injection (a slow disk under leader appends)
- :mod:`.fetcher`     followers pulling from leaders through the binary fetch API
- :mod:`.auth`        inter-broker credentials: a replica's fetch proves its broker
- :mod:`.manager`     the broker's side of all of it, used by the HTTP layer
- :mod:`.config`      the settings replication reads (:class:`.config.ReplicaConfig`)

See docs/ARCHITECTURE.md ("Cluster mode") for the ZooKeeper layout and the HTTP contract.
"""
