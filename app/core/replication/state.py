"""The records cluster mode keeps in ZooKeeper, and their JSON form.

A topic's assignment (which brokers hold each partition) is written once when
the topic is created. A partition's state (leader, leader epoch, ISR) changes
only through compare-and-set writes on its znode version: by the controller
when it elects a leader, by the leader when it shrinks or expands the ISR.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state``; Kafka's LeaderAndIsr."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "controller_epoch": self.controller_epoch,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        raw: dict[str, Any] = orjson.loads(data)
        return cls(
            leader=int(raw["leader"]),
            leader_epoch=int(raw["leader_epoch"]),
            isr=tuple(int(b) for b in raw["isr"]),
            controller_epoch=int(raw.get("controller_epoch", 0)),
        )


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: the topic's id, configs and replicas of each partition."""

    topic_id: str
    replicas: tuple[tuple[int, ...], ...]
    configs: dict[str, Any] = field(default_factory=dict)

    @property
    def partitions(self) -> int:
        return len(self.replicas)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "topic_id": self.topic_id,
                "partitions": {str(p): list(r) for p, r in enumerate(self.replicas)},
                "configs": self.configs,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> TopicAssignment:
        raw: dict[str, Any] = orjson.loads(data)
        parts: dict[str, list[int]] = raw["partitions"]
        replicas = tuple(tuple(int(b) for b in parts[str(p)]) for p in range(len(parts)))
        return cls(str(raw.get("topic_id", "")), replicas, dict(raw.get("configs", {})))


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """``/brokers/ids/<id>`` (ephemeral): a live broker and where clients reach it.

    JSON: ``{"id": 1, "url": "http://h:8080", "kafka_listener": {"host": "h", "port":
    9092}}``; ``kafka_listener`` (the advertised address of its Kafka door, issue #19) is
    absent when the broker has none, and a registration written before the field existed
    parses with ``kafka_listener`` None.
    """

    id: int
    url: str
    kafka_listener: tuple[str, int] | None = None

    def to_json(self) -> bytes:
        raw: dict[str, Any] = {"id": self.id, "url": self.url}
        if self.kafka_listener is not None:
            host, port = self.kafka_listener
            raw["kafka_listener"] = {"host": host, "port": port}
        return orjson.dumps(raw)

    @classmethod
    def from_json(cls, data: bytes) -> BrokerInfo:
        raw: dict[str, Any] = orjson.loads(data)
        kafka = raw.get("kafka_listener")
        listener = None if not kafka else (str(kafka["host"]), int(kafka["port"]))
        return cls(int(raw["id"]), str(raw["url"]), listener)
