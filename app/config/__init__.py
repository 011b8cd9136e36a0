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
import socket
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.config.addresses import WILDCARD_HOSTS, is_loopback, split_host_port
from app.config.kafka import KafkaDoorSettings
from app.config.registry import SchemaRegistrySettings
from app.core.limits import PartitionBudget
from app.core.log.config import LogConfig
from app.core.log.topic_rules import MAX_PARTITIONS


class Settings(KafkaDoorSettings, SchemaRegistrySettings, BaseSettings):
    """Every setting of a broker; the Kafka door's and the schema registry's are declared in
    :mod:`app.config.kafka` and :mod:`app.config.registry` (one class, split for size)."""

    model_config = SettingsConfigDict(env_prefix="LOGBUS_", extra="forbid")

    data_dir: Path = Field(default=Path("./data"), description="Where the logs live.")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    broker_id: int = Field(default=0, ge=0)
    advertised_url: str | None = Field(
        default=None, description="URL clients use to reach this broker (default http://host:port)."
    )
    # TLS on the listener (README "TLS"): HTTPS and WSS when a certificate is set.
    ssl_certfile: Path | None = Field(
        default=None,
        description="PEM certificate chain of the listener; set with ssl_keyfile to serve "
        "https:// and wss:// (the binary fetch then copies instead of sendfile).",
    )
    ssl_keyfile: Path | None = Field(default=None, description="PEM private key of ssl_certfile.")
    ssl_ca_file: Path | None = Field(
        default=None,
        description="PEM CA bundle that signs client certificates (mutual TLS), and that "
        "followers verify their leader with when inter_broker_ca_file is unset.",
    )
    ssl_client_auth: Literal["none", "requested", "required"] = Field(
        default="none",
        description="Kafka's ssl.client.auth: ask for a client certificate (requested) or "
        "refuse the handshake without one signed by ssl_ca_file (required).",
    )
    inter_broker_tls: bool = Field(
        default=False,
        description="Followers replicate only over https:// and verify the leader's "
        "certificate (inter_broker_ca_file or ssl_ca_file); they present ssl_certfile.",
    )
    inter_broker_ca_file: Path | None = Field(
        default=None, description="PEM CA bundle followers verify their leader with."
    )
    allow_unauthenticated_network: bool = Field(
        default=False,
        description="Serve on a non-loopback address with no authentication: anyone who "
        "reaches the port can read, write and delete everything. Refused unless set.",
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
        default=True,
        description="Group-commit small one-partition produce requests too: those whose "
        "bodies arrive in the same event-loop turn share one append, at the cost of a wait "
        "of one loop turn each. On by default: on the benchmark machine, with the "
        "collector settled (gc_young_threshold), it cut the broker's CPU per one-record "
        "request by a third and its p99 at 64 connections (bench/RESULTS.md). Requests "
        "appended on a worker thread are always group-committed.",
    )
    group_commit_partitions: bool = Field(
        default=True,
        description="With group_commit_inline, on a lone broker: small requests to several "
        "partitions (keyed records spread by the partitioner) join each partition's group "
        "too, instead of one append per partition per request. A 10-record request to 4 "
        "partitions cost ~40% less broker CPU (bench/RESULTS.md). In a cluster such "
        "requests are appended alone (their leadership checks are all or none).",
    )
    gc_young_threshold: int = Field(
        default=10_000,
        ge=0,
        description="The served process's garbage-collector threshold for its youngest "
        "generation (Python's default is 700), set after startup, when everything built "
        "until then is frozen out of collection (gc.freeze). Requests make no reference "
        "cycles, but under load the objects of requests in flight were counted as new "
        "allocations: every ~70 requests a young collection promoted them, and every few "
        "seconds a full collection of the whole heap stalled the event loop for tens of "
        "ms (the produce p99). 0: keep Python's default thresholds.",
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
    ws_compression: bool = Field(
        default=False,
        description="Offer WebSocket permessage-deflate. Off by default: each compressed "
        "socket holds its own zlib state (measured ~40 KB per idle subscriber) and "
        "compresses every frame itself, so subscribers sharing a frame no longer share "
        "the work.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Largest request line plus headers (431 above).",
    )
    max_header_count: int = Field(
        default=100, ge=8, description="Most header fields in one request (431 above)."
    )
    # The broker-wide memory budget (app/api/memory.py), Kafka's queued.max.request.bytes.
    memory_budget_bytes: int | None = Field(
        default=None,
        ge=1024 * 1024,
        description="Kafka's queued.max.request.bytes: memory request bodies, JSON fetch "
        "answers and WebSocket frames may hold at once; above it reading, rendering and "
        "sending wait. Default: a quarter of RAM, between 64 MiB and 512 MiB.",
    )
    memory_wait_timeout_ms: int = Field(
        default=30_000,
        ge=1,
        description="Longest a fetch answer waits for the memory budget before answering "
        "503 BROKER_NOT_AVAILABLE (retriable).",
    )
    # Browsers (README "Browsers and CORS"): off by default, so no page from another
    # origin may call the broker or open a WebSocket to it.
    cors_allowed_origins: list[str] = Field(
        default_factory=list,
        description="Origins (scheme://host[:port]) whose pages may call the broker and open "
        "WebSockets; '*' allows any. Empty: CORS off, cross-origin WebSockets refused (403).",
    )
    cors_allowed_methods: list[str] = Field(
        default_factory=lambda: ["GET", "POST", "PUT", "DELETE"],
        description="Methods a preflight allows for the allowed origins.",
    )
    cors_allowed_headers: list[str] = Field(
        default_factory=lambda: ["Content-Type", "Accept", "Authorization"],
        description="Request headers a preflight allows for the allowed origins.",
    )
    cors_allow_credentials: bool = Field(
        default=False,
        description="Let allowed origins send cookies/credentials (never with '*').",
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
    group_min_session_timeout_ms: int = Field(
        default=6_000,
        ge=1,
        description="Kafka's group.min.session.timeout.ms: the shortest session a classic "
        "group member (JoinGroup on the Kafka door) may ask for (INVALID_SESSION_TIMEOUT).",
    )
    group_max_session_timeout_ms: int = Field(
        default=1_800_000,
        ge=1,
        description="Kafka's group.max.session.timeout.ms: the longest session a classic "
        "group member may ask for.",
    )
    group_initial_rebalance_delay_ms: int = Field(
        default=3_000,
        ge=0,
        description="Kafka's group.initial.rebalance.delay.ms: an empty classic group waits "
        "this long (again after each join, up to the rebalance timeout) for more members "
        "before its first generation.",
    )
    group_max_size: int = Field(
        default=1_000,
        ge=1,
        description="Kafka's group.max.size: members a classic group may have (KIP-394 "
        "pending ones counted); one more gets GROUP_MAX_SIZE_REACHED.",
    )
    transaction_state_log_num_partitions: int = Field(
        default=50,
        ge=1,
        le=1000,
        description="Kafka's transaction.state.log.num.partitions: partitions of "
        "__transaction_state (fixed once the topic exists).",
    )
    transaction_state_log_replication_factor: int = Field(
        default=3,
        ge=1,
        description="Kafka's transaction.state.log.replication.factor (capped by the live "
        "brokers when __transaction_state is created).",
    )
    transaction_max_timeout_ms: int = Field(
        default=900_000,
        ge=1,
        le=2**31 - 1,
        description="Kafka's transaction.max.timeout.ms: the longest transaction.timeout.ms "
        "a transactional producer may ask for (INVALID_TRANSACTION_TIMEOUT above).",
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = Field(
        default=10_000,
        ge=10,
        description="Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: how "
        "often the coordinator aborts transactions past their timeout (and retries markers).",
    )
    transactional_id_expiration_ms: int = Field(
        default=7 * 24 * 3600 * 1000,
        ge=1,
        description="Kafka's transactional.id.expiration.ms: a transactional id with no "
        "transaction open and no change for this long is forgotten (its next init gets a "
        "new producer id).",
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
    # Security (README "Security"; app/api/security.py). Off by default: `make run` stays a
    # zero-config development broker on 127.0.0.1.
    authentication: str = Field(
        default="none",
        description="How clients prove who they are: none, or a comma-separated list of "
        "basic (users file, `logbus users`) and jwt (bearer tokens checked against a JWKS). "
        "Without it every client is User:ANONYMOUS.",
    )
    authorizer: str = Field(
        default="none",
        description="none, or acl: Kafka's ACL authorizer decides every operation "
        "(`logbus acls`, `/acls`).",
    )
    super_users: str = Field(
        default="",
        description="Kafka's super.users: principals the authorizer never refuses, separated "
        "by ';' (e.g. User:admin;User:ops).",
    )
    allow_everyone_if_no_acl_found: bool = Field(
        default=False,
        description="Kafka's allow.everyone.if.no.acl.found: a resource no ACL names is open "
        "to everyone (off: closed to all but super users).",
    )
    users_file: Path | None = Field(
        default=None,
        description="The users of basic authentication (default <data-dir>/users.json).",
    )
    acls_file: Path | None = Field(
        default=None,
        description="One broker's ACLs (default <data-dir>/acls.json); a cluster keeps them "
        "in ZooKeeper.",
    )
    jwt_jwks_file: Path | None = Field(
        default=None, description="JWKS (JSON Web Key Set) file whose keys sign bearer tokens."
    )
    jwt_jwks_url: str | None = Field(
        default=None, description="JWKS URL instead of a file (fetched and cached)."
    )
    jwt_issuer: str | None = Field(default=None, description="Required `iss` of bearer tokens.")
    jwt_audience: str | None = Field(default=None, description="Required `aud` of bearer tokens.")
    jwt_principal_claim: str = Field(
        default="sub", description="The claim naming the user (principal User:<claim>)."
    )
    jwt_algorithms: str = Field(
        default="RS256,ES256,PS256,EdDSA",
        description="Signature algorithms accepted, comma-separated (never none or HS*).",
    )
    jwt_clock_skew_s: float = Field(
        default=30.0, ge=0, le=600, description="Leeway for exp/nbf/iat, in seconds."
    )

    # Client quotas (README "Quotas"; app/api/quotas.py): set through /quotas.
    quotas_file: Path | None = Field(
        default=None,
        description="One broker's client quotas (default <data-dir>/quotas.json); a cluster "
        "keeps them in ZooKeeper (/config/users, /config/clients).",
    )
    quota_window_num: int = Field(
        default=11,
        ge=2,
        le=1000,
        description="Kafka's quota.window.num: samples in the window a quota is measured over.",
    )
    quota_window_size_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Kafka's quota.window.size.seconds: the length of one sample. A principal "
        "may burst a whole window's worth (num x size x quota) before it is throttled, and "
        "is never delayed longer than the window.",
    )

    def check_kafka_listener_exposure(self) -> None:
        """Refuse a Kafka door that would bypass the broker's security.

        A PLAINTEXT listener beside ``authentication`` would let Kafka clients in
        unauthenticated (use SASL_PLAINTEXT/SASL_SSL, or SSL with
        ``ssl_client_auth=required``); an SSL listener without a required client
        certificate likewise. A listener that authenticates nobody on a non-loopback
        address needs ``allow_unauthenticated_network``, as an open HTTP listener does.
        SSL and SASL_SSL need ``ssl_certfile`` and ``ssl_keyfile``.

        Raises:
            ValueError: saying which and how out.
        """
        if not self.kafka_listener:
            return
        protocol = self.kafka_security_protocol
        if protocol in ("SSL", "SASL_SSL") and not self.tls:
            raise ValueError(
                f"kafka_security_protocol {protocol} needs ssl_certfile and ssl_keyfile"
            )
        authenticates = protocol.startswith("SASL_") or (
            protocol == "SSL" and self.ssl_client_auth == "required"
        )
        if self.authentication != "none" and not authenticates:
            raise ValueError(
                f"kafka_security_protocol {protocol} beside authentication={self.authentication} "
                "would let Kafka clients past it unauthenticated: use SASL_PLAINTEXT or "
                "SASL_SSL (or SSL with ssl_client_auth=required), or unset kafka_listener."
            )
        if (
            protocol.startswith("SASL_")
            and "OAUTHBEARER" in self.kafka_sasl_mechanism_list
            and (self.jwt_jwks_file is None) == (self.jwt_jwks_url is None)
        ):
            raise ValueError(
                "kafka_sasl_mechanisms OAUTHBEARER checks JWTs against the keys of "
                "jwt_jwks_file or jwt_jwks_url: set exactly one of them"
            )
        host, _ = split_host_port(self.kafka_listener)
        if not authenticates and not is_loopback(host) and not self.allow_unauthenticated_network:
            raise ValueError(
                f"refusing the Kafka listener on {self.kafka_listener} with no authentication: "
                "anyone who reaches it can read and write every topic. Bind it to 127.0.0.1, "
                "set kafka_security_protocol=SASL_SSL (or SASL_PLAINTEXT), "
                "or pass --allow-unauthenticated-network (LOGBUS_ALLOW_UNAUTHENTICATED_NETWORK=1)."
            )

    fetch_render_cache_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=0,
        description="JSON fetch: the rendered records of recently fetched batches are kept "
        "(with the batches' bytes, to check a hit) up to this many bytes, so consumers "
        "polling one partition's tail do not decode and render the same records again "
        "(app/api/rendered.py). A batch over an eighth of it is never kept; 0: off.",
    )

    @field_validator("authentication")
    @classmethod
    def _check_authentication(cls, value: str) -> str:
        names = [n.strip().lower() for n in value.split(",") if n.strip()] or ["none"]
        unknown = set(names) - {"none", "basic", "jwt"}
        if unknown or ("none" in names and len(names) > 1):
            raise ValueError("authentication is none, or a list of basic and jwt")
        return ",".join(names)

    @field_validator("authorizer")
    @classmethod
    def _check_authorizer(cls, value: str) -> str:
        if value.strip().lower() not in ("none", "acl"):
            raise ValueError("authorizer is none or acl")
        return value.strip().lower()

    @field_validator("jwt_algorithms")
    @classmethod
    def _check_algorithms(cls, value: str) -> str:
        algs = [a.strip() for a in value.split(",") if a.strip()]
        if not algs or any(a.lower() == "none" or a.upper().startswith("HS") for a in algs):
            raise ValueError("jwt_algorithms: asymmetric algorithms only (no none, no HS*)")
        return ",".join(algs)

    @property
    def authentication_mechanisms(self) -> list[str]:
        return [] if self.authentication == "none" else self.authentication.split(",")

    @property
    def super_user_list(self) -> list[str]:
        return [p.strip() for p in self.super_users.split(";") if p.strip()]

    @model_validator(mode="after")
    def _check_tls(self) -> Settings:
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("ssl_certfile and ssl_keyfile go together")
        if self.ssl_client_auth != "none" and (self.ssl_ca_file is None or not self.tls):
            raise ValueError("ssl_client_auth needs ssl_certfile, ssl_keyfile and ssl_ca_file")
        return self

    @model_validator(mode="after")
    def _check_cluster_kafka_port(self) -> Settings:
        # A cluster broker publishes its Kafka listener in its ZooKeeper registration,
        # written before the listener binds (and other brokers watch only the set of
        # registrations, not their values): an ephemeral port would be published as 0.
        if (
            self.zookeeper
            and self.kafka_listener
            and not self.kafka_advertised_listener
            and split_host_port(self.kafka_listener)[1] == 0
        ):
            raise ValueError(
                f"kafka_listener {self.kafka_listener!r}: a cluster broker's Kafka listener "
                "needs a fixed port (or kafka_advertised_listener), which it publishes in "
                "ZooKeeper for the other brokers' Metadata answers"
            )
        return self

    def check_network_exposure(self) -> None:
        """Refuse an open broker on the network (issue 15's safe defaults).

        Binding a non-loopback address with no authentication configured lets
        anyone who reaches the port read, write and delete every topic; the
        operator must say so with ``allow_unauthenticated_network``
        (``--allow-unauthenticated-network``). Mutual TLS with a required client
        certificate counts as authentication.

        Raises:
            ValueError: naming the address and the two ways out.
        """
        self.check_kafka_listener_exposure()
        if (
            is_loopback(self.host)
            or self.allow_unauthenticated_network
            or self.authentication != "none"
            or self.ssl_client_auth == "required"
        ):
            return
        raise ValueError(
            f"refusing to serve {self.host}:{self.port} with no authentication: anyone who "
            "reaches it can read, write and delete every topic. Configure authentication "
            "(or ssl_client_auth=required), bind 127.0.0.1, or pass "
            "--allow-unauthenticated-network (LOGBUS_ALLOW_UNAUTHENTICATED_NETWORK=1)."
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
    def tls(self) -> bool:
        """True when the listener serves TLS (https://, wss://)."""
        return self.ssl_certfile is not None

    @property
    def url(self) -> str:
        """The URL advertised in /metadata: never a wildcard address (Kafka's rule).

        With no advertised_url, a wildcard bind (0.0.0.0, ::) advertises this
        machine's host name (socket.gethostname()) instead; set advertised_url
        where other hosts know it by another name.
        """
        if self.advertised_url:
            return self.advertised_url
        host = self.host
        if host in WILDCARD_HOSTS:
            host = socket.gethostname()
        if ":" in host:
            host = f"[{host}]"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

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
