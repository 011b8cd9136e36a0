"""The Kafka door's settings (``kafka_*``, issue 19), part of :class:`app.config.Settings`.

Declared on their own class for size; ``Settings`` inherits them, so they are read as
``settings.kafka_listener`` and set as ``LOGBUS_KAFKA_LISTENER`` like any other. The check
that needs the security settings too (``check_kafka_listener_exposure``) stays on
``Settings``.
"""

from __future__ import annotations

import socket
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from app.config.addresses import WILDCARD_HOSTS, split_host_port


class KafkaDoorSettings(BaseSettings):
    # The Kafka door (app/kafka, issue 19): Kafka's binary protocol beside HTTP.
    kafka_listener: str | None = Field(
        default=None,
        description="HOST:PORT of the Kafka-protocol listener (Kafka clients: librdkafka, "
        "kafka-python, aiokafka); unset: no Kafka door.",
    )
    kafka_advertised_listener: str | None = Field(
        default=None,
        description="HOST:PORT Kafka clients are told to connect to (Metadata); default the "
        "listener's own, a wildcard host replaced by this machine's host name. Never a "
        "wildcard address.",
    )
    kafka_socket_request_max_bytes: int = Field(
        default=100 * 1024 * 1024,
        ge=1024,
        le=2**31 - 1,
        description="Kafka's socket.request.max.bytes: a larger frame closes its connection.",
    )
    kafka_max_connections_per_ip: int = Field(
        default=1000,
        ge=1,
        description="Kafka's max.connections.per.ip: more from one address are closed at once.",
    )
    kafka_connections_max_idle_ms: int = Field(
        default=600_000,
        ge=1000,
        description="Kafka's connections.max.idle.ms: a connection with no request for this "
        "long is closed.",
    )

    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="Kafka's listener security protocol of the Kafka door: PLAINTEXT, SSL "
        "(TLS with ssl_certfile/ssl_keyfile; a client certificate's subject is the principal), "
        "SASL_PLAINTEXT or SASL_SSL (SASL required before any other request, against the "
        "users of `logbus users`).",
    )
    kafka_sasl_mechanisms: str = Field(
        default="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        description="Kafka's sasl.enabled.mechanisms of the Kafka door, comma-separated: "
        "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (JWTs checked as HTTP's bearer "
        "tokens: needs jwt_jwks_file or jwt_jwks_url).",
    )
    kafka_sasl_max_concurrent_checks: int = Field(
        default=2,
        ge=1,
        le=64,
        description="SASL PLAIN password checks (scrypt, slow by design) run at once, at most; "
        "more wait.",
    )

    kafka_failed_authentication_delay_ms: int = Field(
        default=100,
        ge=0,
        le=60_000,
        description="Kafka's connection.failed.authentication.delay.ms: a failed SASL "
        "authentication is answered (and its connection closed) this much later, which "
        "slows password guessing.",
    )

    kafka_connections_max_reauth_ms: int = Field(
        default=0,
        ge=0,
        le=2**31 - 1,
        description="Kafka's connections.max.reauth.ms: a SASL session on the Kafka door "
        "lasts this long (less when an OAUTHBEARER token expires sooner), then the client "
        "re-authenticates on its connection (KIP-368) or the connection closes; 0: sessions "
        "last as long as their connection.",
    )
    kafka_max_incremental_fetch_session_cache_slots: int = Field(
        default=1000,
        ge=0,
        le=1_000_000,
        description="Kafka's max.incremental.fetch.session.cache.slots: fetch sessions "
        "(KIP-227) the Kafka door keeps at once; 0 answers every fetch sessionless.",
    )
    kafka_fetch_session_eviction_ms: int = Field(
        default=120_000,
        ge=0,
        le=86_400_000,
        description="Kafka's fetch session eviction time (fixed at 120 s there): when the "
        "cache is full, a session idle this long makes room for a new one, and a session "
        "younger than this is never evicted for a larger one.",
    )
    kafka_fetch_session_cache_max_partitions: int = Field(
        default=200_000,
        ge=0,
        le=100_000_000,
        description="Partitions all fetch sessions of the Kafka door hold together, at most "
        "(each costs a few hundred bytes); past it new sessions are not created and a "
        "session an incremental fetch would grow past it is closed.",
    )

    @field_validator("kafka_sasl_mechanisms")
    @classmethod
    def _check_kafka_sasl_mechanisms(cls, value: str) -> str:
        names = [m.strip().upper() for m in value.split(",") if m.strip()]
        known = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
        if not names or any(m not in known for m in names):
            raise ValueError(f"kafka_sasl_mechanisms: one or more of {', '.join(known)}")
        return ",".join(dict.fromkeys(names))

    @property
    def kafka_sasl_mechanism_list(self) -> list[str]:
        return self.kafka_sasl_mechanisms.split(",")

    @field_validator("kafka_advertised_listener")
    @classmethod
    def _check_kafka_advertised(cls, value: str | None) -> str | None:
        if value is not None:
            host, _ = split_host_port(value)
            if host in WILDCARD_HOSTS:
                raise ValueError(
                    f"kafka_advertised_listener {value!r} is a wildcard address: clients "
                    "cannot connect to it; advertise this host's name or address"
                )
        return value

    kafka_acl_max_changes_per_request: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="CreateAcls' creations and DeleteAcls' filters in one request, at most "
        "(each checked and written in one change of the ACL store); a larger request is "
        "answered INVALID_REQUEST for every entry, nothing changed. HTTP's `POST /acls` "
        "takes 1000 bindings.",
    )

    kafka_client_quota_max_entries_per_request: int = Field(
        default=1000,
        ge=1,
        le=100_000,
        description="AlterClientQuotas' entries in one request, at most (each checked and "
        "all written in one change of the quota store); a larger request is answered "
        "INVALID_REQUEST for every entry, nothing changed. HTTP's `POST /quotas` takes 1000 "
        "entries.",
    )

    @field_validator("kafka_listener")
    @classmethod
    def _check_kafka_listener(cls, value: str | None) -> str | None:
        if value is not None:
            split_host_port(value)
        return value

    @property
    def kafka_advertised(self) -> tuple[str, int] | None:
        """Where Kafka clients reach this broker: ``kafka_advertised_listener``, else the
        listener with a wildcard host replaced by this machine's host name (as ``url``);
        None without a Kafka listener."""
        if self.kafka_advertised_listener:
            return split_host_port(self.kafka_advertised_listener)
        if not self.kafka_listener:
            return None
        host, port = split_host_port(self.kafka_listener)
        return (socket.gethostname() if host in WILDCARD_HOSTS else host), port
