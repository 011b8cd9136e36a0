"""What a cluster broker's replication needs to know of its settings.

A plain frozen dataclass, so :mod:`app.core` never reads the broker's settings
(``app.config``, the ``LOGBUS_*`` environment and command line): ``app/api`` builds
one from them (``app/api/app.py: _topology``). Field names and meanings are the
settings' own; defaults are the settings' defaults, so a test can name only what it
needs. Immutable after start; shared read-only by the manager, the controller
candidate and the follower fetcher.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """The settings cluster mode reads; each means what the ``LOGBUS_*`` setting of its
    name means (``app/config/``)."""

    zookeeper: str
    """ZooKeeper connect string, ``HOST:PORT[,HOST:PORT...][/chroot]``."""
    broker_id: int
    """This broker's id, unique in the cluster."""
    url: str
    """The URL this broker advertises to clients and other brokers."""
    kafka_listener: tuple[str, int] | None = None
    """(host, port) of this broker's advertised Kafka listener, published in its broker
    registration for the other brokers' Metadata answers; None without a Kafka door."""
    zookeeper_session_timeout_ms: int = 6_000
    replica_lag_time_max_ms: int = 10_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 4 * 1024 * 1024
    default_replication_factor: int = 1
    unclean_leader_election_enable: bool = False
    leader_imbalance_check_interval_ms: int = 30_000
    inter_broker_tls: bool = False
    """Followers fetch from their leaders only over ``https://``."""
    inter_broker_ca_file: str | None = None
    """The CA followers verify their leaders against (else ``ssl_ca_file``)."""
    ssl_ca_file: str | None = None
    ssl_certfile: str | None = None
    """This broker's listener certificate, presented to leaders that require one."""
    ssl_keyfile: str | None = None
