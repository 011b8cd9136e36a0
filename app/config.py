"""Broker settings: one typed place, from arguments, ``LOGBUS_*`` env vars or a config file.

Precedence (highest first): explicit arguments (the CLI's flags), environment
variables ``LOGBUS_<NAME>``, the optional config file (TOML or JSON, passed as
``--config`` or ``LOGBUS_CONFIG``), then the defaults below.

Topic defaults use Kafka's names under ``log_defaults``, e.g. in TOML::

    port = 9090
    [log_defaults]
    "retention.ms" = 3600000
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.limits import PartitionBudget
from app.core.log.config import LogConfig
from app.core.log.manager import MAX_PARTITIONS


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOGBUS_", extra="forbid")

    data_dir: Path = Field(default=Path("./data"), description="Where the logs live.")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    broker_id: int = Field(default=0, ge=0)
    advertised_url: str | None = Field(
        default=None, description="URL clients use to reach this broker (default http://host:port)."
    )
    auto_create_topics_enable: bool = Field(
        default=True, description="Kafka's auto.create.topics.enable: produce creates a topic."
    )
    num_partitions: int = Field(default=1, ge=1, description="Partitions of auto-created topics.")
    max_request_bytes: int = Field(
        default=100 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 above)."
    )
    fetch_max_bytes: int = Field(default=50 * 1024 * 1024, ge=1)
    inline_append_max_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="Produce requests whose batches total at most this many bytes are "
        "appended on the event loop (a page-cache write of a few KB takes microseconds; "
        "the hop to a worker thread costs more); larger ones, acks=all ones and any to a topic "
        "that fsyncs per append "
        "(flush.messages), go to a worker thread. 0: every append on a worker thread.",
    )
    group_commit_inline: bool = Field(
        default=False,
        description="Group-commit small one-partition produce requests too: those whose "
        "bodies arrive in the same event-loop turn share one append, at the cost of a wait "
        "of one loop turn each. Off by default: on the benchmark machine the wait cost "
        "more than the appends it saved. Requests appended on a worker thread are always "
        "group-committed.",
    )
    # The listener's limits (app/api/limits.py): what a slow, careless or hostile client
    # may cost the broker. Each breach has its own answer; see the README's "Limits".
    max_connections: int = Field(
        default=10_000,
        ge=1,
        description="Kafka's max.connections: open HTTP and WebSocket connections, capped "
        "at half the process's file-descriptor limit (503 above).",
    )
    max_connections_per_ip: int = Field(
        default=2_048,
        ge=1,
        description="Kafka's max.connections.per.ip: connections from one client address "
        "(429 above); raise it when clients reach the broker through one proxy address.",
    )
    connections_max_idle_ms: int = Field(
        default=60_000,
        ge=100,
        description="Kafka's connections.max.idle.ms: a connection with no request in "
        "flight for this long is closed (also before its first request).",
    )
    request_header_timeout_ms: int = Field(
        default=20_000,
        ge=100,
        description="A request's line and headers must arrive within this long of their "
        "first byte (408 otherwise).",
    )
    request_body_timeout_ms: int = Field(
        default=120_000,
        ge=100,
        description="A request body must arrive within this long of its head, counting only "
        "time the broker is reading it (408 otherwise).",
    )
    send_timeout_ms: int = Field(
        default=60_000,
        ge=100,
        description="A client that takes none of an answer's bytes for this long is "
        "disconnected and the answer's memory returned (a reader that never reads).",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Largest request line plus headers (431 above).",
    )
    max_header_count: int = Field(
        default=100, ge=8, description="Most header fields in one request (431 above)."
    )
    log_retention_check_interval_ms: int = Field(default=300_000, ge=10)
    log_cleaner_backoff_ms: int = Field(
        default=15_000,
        ge=1,
        description="How long the log cleaner sleeps when no compacted log needs cleaning "
        "(Kafka's log.cleaner.backoff.ms).",
    )
    log_flush_scheduler_interval_ms: int = Field(default=1000, ge=10)
    offsets_topic_num_partitions: int = Field(
        default=50,
        ge=1,
        le=1000,
        description="Kafka's offsets.topic.num.partitions: partitions of __consumer_offsets "
        "(fixed once the topic exists).",
    )
    offsets_retention_minutes: int = Field(
        default=7 * 24 * 60,
        ge=1,
        description="Kafka's offsets.retention.minutes: committed offsets of an empty group "
        "expire this long after the group emptied or the last commit.",
    )
    offsets_retention_check_interval_ms: int = Field(default=600_000, ge=10)
    group_consumer_session_timeout_ms: int = Field(
        default=45_000,
        ge=1,
        description="Kafka's group.consumer.session.timeout.ms: a member silent this long "
        "is removed and its partitions reassigned.",
    )
    group_consumer_heartbeat_interval_ms: int = Field(
        default=5_000,
        ge=1,
        description="Kafka's group.consumer.heartbeat.interval.ms, told to members.",
    )
    producer_id_expiration_ms: int = Field(
        default=24 * 3600 * 1000,
        ge=1,
        description="Kafka's producer.id.expiration.ms: a partition forgets an idempotent "
        "producer this long after its last append.",
    )
    offsets_commit_timeout_ms: int = Field(
        default=5_000,
        ge=1,
        description="Kafka's offsets.commit.timeout.ms: how long a group write waits for the "
        "in-sync replicas of its __consumer_offsets partition (cluster mode).",
    )
    zookeeper: str | None = Field(
        default=None,
        description="ZooKeeper connect string, HOST:PORT[,HOST:PORT...][/chroot]: join a "
        "cluster. Unset: one broker that needs nothing outside itself.",
    )
    zookeeper_session_timeout_ms: int = Field(
        default=6_000,
        ge=1_000,
        description="Kafka's zookeeper.session.timeout.ms: a broker silent this long is "
        "declared dead and its partitions get new leaders.",
    )
    replica_lag_time_max_ms: int = Field(
        default=10_000,
        ge=100,
        description="Kafka's replica.lag.time.max.ms: a follower not caught up for this long "
        "leaves the in-sync replica set.",
    )
    replica_fetch_wait_max_ms: int = Field(
        default=500,
        ge=1,
        le=60_000,
        description="Kafka's replica.fetch.wait.max.ms: how long a follower's fetch waits for data.",
    )
    replica_fetch_max_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        description="Kafka's replica.fetch.max.bytes: bytes a follower asks for per fetch.",
    )
    default_replication_factor: int = Field(
        default=1,
        ge=1,
        description="Kafka's default.replication.factor: for auto-created topics and "
        "creates that do not say.",
    )
    offsets_topic_replication_factor: int = Field(
        default=3,
        ge=1,
        description="Kafka's offsets.topic.replication.factor (capped by the live brokers "
        "when __consumer_offsets is created).",
    )
    unclean_leader_election_enable: bool = Field(
        default=False,
        description="Kafka's unclean.leader.election.enable: elect a replica outside the ISR "
        "when no ISR member is alive (may lose acknowledged records).",
    )
    leader_imbalance_check_interval_ms: int = Field(
        default=30_000,
        ge=100,
        description="How often the controller moves leadership back to preferred replicas "
        "(Kafka's leader.imbalance.check.interval.seconds, in ms).",
    )
    max_partitions_per_topic: int = Field(
        default=MAX_PARTITIONS,
        ge=1,
        le=MAX_PARTITIONS,
        description="Most partitions one topic may have (400 INVALID_PARTITIONS above).",
    )
    max_partitions: int | None = Field(
        default=None,
        ge=1,
        description="Most partitions this broker hosts in total; each holds 3 file descriptors "
        "open. Default: a ninth of RLIMIT_NOFILE (a third of the descriptors for partitions).",
    )
    reserved_file_descriptors: int | None = Field(
        default=None,
        ge=0,
        description="Descriptors a topic create must leave free (connections, rolled "
        "segments, checkpoints). Default: a quarter of RLIMIT_NOFILE.",
    )
    log_defaults: dict[str, Any] = Field(
        default_factory=dict, description="Broker-wide topic config defaults, Kafka names."
    )

    @field_validator("log_defaults")
    @classmethod
    def _check_log_defaults(cls, value: dict[str, Any]) -> dict[str, Any]:
        LogConfig().with_overrides(value)  # raises InvalidConfig on a bad name or value
        return value

    @property
    def partition_budget(self) -> PartitionBudget:
        return PartitionBudget(
            max_per_topic=self.max_partitions_per_topic,
            max_total=self.max_partitions,
            reserved_fds=self.reserved_file_descriptors,
        )

    @property
    def log_config(self) -> LogConfig:
        return LogConfig().with_overrides(self.log_defaults)

    @property
    def url(self) -> str:
        return self.advertised_url or f"http://{self.host}:{self.port}"

    @classmethod
    def load(cls, config_file: Path | str | None = None, **overrides: Any) -> Settings:
        """Settings from an optional file, env vars and explicit overrides (None = not given)."""
        file_values: dict[str, Any] = {}
        path = config_file or os.environ.get("LOGBUS_CONFIG")
        if path:
            text = Path(path).read_text()
            file_values = json.loads(text) if str(path).endswith(".json") else tomllib.loads(text)
        given = {k: v for k, v in overrides.items() if v is not None}
        env_set = {name for name in cls.model_fields if f"LOGBUS_{name.upper()}" in os.environ}
        merged = {k: v for k, v in file_values.items() if k not in env_set}
        merged.update(given)
        return cls(**merged)
