"""Admin: topics (create, list, describe, delete), offset lookups, consumer groups
(list, describe, committed offsets, reset, delete) and transactions (list, describe,
abort), sync and asyncio.

Topic calls go to any live broker (the next one when a broker cannot be
reached), offset lookups to the partition's leader, group calls to the group's
coordinator, transaction calls to the transactional id's coordinator
(:mod:`app.client._cluster`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeVar
from urllib.parse import urlencode

import httpx

from app.client import _cluster, _http
from app.client._cluster import Bootstrap, Cluster
from app.client._http import Call, group_path, topic_path, txn_path
from app.client.auth import Auth
from app.client.types import OffsetAndTimestamp, TopicPartition
from app.common.isolation import check_isolation_level

T = TypeVar("T")
_BACKOFF_S = 0.1


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    # None in a cluster where the answering broker holds no replica of the partition.
    log_start_offset: int | None
    high_watermark: int | None
    log_end_offset: int | None
    leader_epoch: int = 0
    offline_replicas: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: list[PartitionInfo]
    configs: dict[str, Any]
    # The configs set on this topic (the rest of ``configs`` are broker defaults).
    config_overrides: dict[str, Any] = field(default_factory=dict)


def _description(body: Any) -> TopicDescription:
    return TopicDescription(
        name=body["name"],
        partitions=[
            PartitionInfo(
                partition=p["partition"],
                leader=p["leader"],
                replicas=list(p["replicas"]),
                isr=list(p["isr"]),
                log_start_offset=p["log_start_offset"],
                high_watermark=p["high_watermark"],
                log_end_offset=p["log_end_offset"],
                leader_epoch=p.get("leader_epoch", 0),
                offline_replicas=list(p.get("offline_replicas") or ()),
            )
            for p in body["partitions"]
        ],
        configs=dict(body.get("configs") or {}),
        config_overrides=dict(body.get("config_overrides") or {}),
    )


def _create_call(
    name: str, partitions: int | None, replication_factor: int | None, configs: Mapping[str, Any]
) -> Call[TopicDescription]:
    body: dict[str, Any] = {"name": name}
    if partitions is not None:
        body["partitions"] = partitions
    if replication_factor is not None:
        body["replication_factor"] = replication_factor
    if configs:
        body["configs"] = dict(configs)
    return Call("POST", "/topics", _description, json=body)


def _list_call() -> Call[dict[str, int]]:
    return Call("GET", "/topics", lambda body: {t["name"]: t["partitions"] for t in body["topics"]})


def _acls_call(
    method: str, filters: Mapping[str, str | None], body: Any = None
) -> Call[list[dict[str, str]]]:
    params: dict[str, str | int] = {k: v for k, v in filters.items() if v is not None}
    return Call(method, "/acls", lambda answer: list(answer["acls"]), params=params, json=body)


def _delete_acls_call(
    filters: Sequence[Mapping[str, str | None]] | None, filter: Mapping[str, str | None]
) -> Call[list[dict[str, str]]]:
    if filters is None:
        return _acls_call("DELETE", filter)
    if filter:
        raise ValueError("pass filters=[...] or one filter's fields, not both")
    body = {"filters": [{k: v for k, v in f.items() if v is not None} for f in filters]}
    return _acls_call("DELETE", {}, body)


def _quotas_call(
    method: str, params: Mapping[str, str | None], body: Any = None
) -> Call[list[dict[str, Any]]]:
    query: dict[str, str | int] = {k: v for k, v in params.items() if v is not None}
    return Call(method, "/quotas", lambda answer: list(answer["quotas"]), params=query, json=body)


def _describe_call(name: str) -> Call[TopicDescription]:
    return Call("GET", topic_path(name), _description)


def _delete_call(name: str) -> Call[None]:
    return Call("DELETE", topic_path(name), lambda body: None, empty_ok=True)


def _at(spec: str | int) -> str | int:
    if isinstance(spec, str) and spec not in ("earliest", "latest"):
        raise ValueError(
            f"an offset spec is 'earliest', 'latest' or a timestamp in ms, got {spec!r}"
        )
    return spec


def _list_offsets_routes(
    cluster: Cluster, partitions: Iterable[TopicPartition], spec: str | int, isolation_level: str
) -> list[tuple[TopicPartition, _cluster.Route[OffsetAndTimestamp | None]]]:
    """ListOffsets, once for :class:`Admin` and :class:`AsyncAdmin`: the spec and isolation
    level checked now (ValueError before any request), then one route a partition to its
    leader; ``None`` where no record is at or after the timestamp."""
    at = _at(spec)
    check_isolation_level(isolation_level)

    def route(tp: TopicPartition) -> _cluster.Route[OffsetAndTimestamp | None]:
        call = _http.list_offset_call(tp.topic, tp.partition, at, isolation_level)
        offset, timestamp = yield from _cluster.leader_route(cluster, tp, call, _BACKOFF_S)
        return None if offset < 0 else OffsetAndTimestamp(offset, timestamp)

    return [(tp, route(tp)) for tp in partitions]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group: str
    state: str
    members: int
    group_epoch: int
    protocol_type: str = "consumer"
    # "consumer" (KIP-848: HTTP, WebSocket, the SDK) or "classic" (Kafka clients' JoinGroup).
    protocol: str = "consumer"


def _committed(body: Any) -> dict[TopicPartition, int]:
    """Committed offsets (partitions without a commit, which the broker lists as -1, left out)."""
    return {
        TopicPartition(o["topic"], o["partition"]): o["offset"]
        for o in body["offsets"]
        if o["offset"] >= 0
    }


def _list_groups_call() -> Call[list[GroupListing]]:
    return Call(
        "GET",
        "/groups",
        lambda body: [
            GroupListing(
                g["group"],
                g["state"],
                g["members"],
                g["group_epoch"],
                g.get("protocol_type", "consumer"),
                g.get("protocol", "consumer"),
            )
            for g in body["groups"]
        ],
    )


def _merge_groups(answers: list[list[GroupListing]]) -> list[GroupListing]:
    """Each broker's groups, once each (by name: a group moving meanwhile is listed once)."""
    merged: dict[str, GroupListing] = {}
    for answer in answers:
        for listing in answer:
            merged.setdefault(listing.group, listing)
    return sorted(merged.values(), key=lambda g: g.group)


def _describe_group_call(group: str) -> Call[dict[str, Any]]:
    return Call("GET", group_path(group), dict)


def _group_offsets_call(group: str, topic: str | None) -> Call[dict[TopicPartition, int]]:
    params: dict[str, str | int] = {"topic": topic} if topic is not None else {}
    return Call("GET", f"{group_path(group)}/offsets", _committed, params=params)


ResetTo = Literal["earliest", "latest", "timestamp", "offset"]


def _reset_call(
    group: str, topic: str, to: ResetTo, value: int | None, partitions: Iterable[int] | None
) -> Call[dict[TopicPartition, int]]:
    body: dict[str, Any] = {"topic": topic, "to": to}
    if partitions is not None:
        body["partitions"] = list(partitions)
    if to in ("timestamp", "offset"):
        if value is None:
            raise ValueError(f"resetting to a {to} needs value=")
        body[to] = value
    return Call("POST", f"{group_path(group)}/offsets/reset", _committed, json=body)


def _delete_group_call(group: str) -> Call[None]:
    return Call("DELETE", group_path(group), lambda body: None, empty_ok=True)


# Transactions (Kafka's ListTransactions, DescribeTransactions; an abort as EndTxn).
# How long a transaction call retries a retriable answer (the coordinator loading, a
# previous transaction still completing) before raising it.
_TXN_RETRY_S = 10.0


def _list_transactions_call(
    states: Iterable[str], producer_ids: Iterable[int], duration_ms: int | None
) -> Call[dict[str, Any]]:
    query: list[tuple[str, str | int]] = [("state", s) for s in states]
    query += [("producer_id", p) for p in producer_ids]
    if duration_ms is not None:
        query.append(("duration_ms", duration_ms))
    path = "/transactions" + (f"?{urlencode(query)}" if query else "")
    return Call("GET", path, dict)


def _merge_transactions(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each broker's transactional ids (each lists those it coordinates), once each."""
    merged: dict[str, dict[str, Any]] = {}
    for answer in answers:
        for t in answer["transaction_states"]:
            merged.setdefault(t["transactional_id"], t)
    return sorted(merged.values(), key=lambda t: str(t["transactional_id"]))


def _describe_transaction_call(transactional_id: str) -> Call[dict[str, Any]]:
    return Call("GET", txn_path(transactional_id), dict)


def _abort_transaction_call(
    transactional_id: str, producer_id: int, producer_epoch: int
) -> Call[dict[str, Any]]:
    body = {"producer_id": producer_id, "producer_epoch": producer_epoch}
    return Call("POST", txn_path(transactional_id, "/abort"), dict, json=body)


def _txn_route(cluster: Cluster, transactional_id: str, call: Call[T]) -> _cluster.Route[T]:
    deadline = time.monotonic() + _TXN_RETRY_S
    return _cluster.txn_route(cluster, transactional_id, call, _BACKOFF_S, deadline)


def _abort_route(
    cluster: Cluster, transactional_id: str, producer_id: int | None, producer_epoch: int | None
) -> _cluster.Route[dict[str, Any]]:
    """EndTxn(abort) with the id's producer id and epoch: given, or the current ones from
    DescribeTransactions (what the broker's ``POST /transactions/{id}/abort`` takes)."""
    if producer_id is None or producer_epoch is None:
        found = yield from _txn_route(
            cluster, transactional_id, _describe_transaction_call(transactional_id)
        )
        producer_id = int(found["producer_id"]) if producer_id is None else producer_id
        if producer_epoch is None:
            producer_epoch = int(found["producer_epoch"])
    call = _abort_transaction_call(transactional_id, producer_id, producer_epoch)
    answer: dict[str, Any] = yield from _txn_route(cluster, transactional_id, call)
    return answer


class Admin:
    """Blocking admin client.

    ``url`` is a broker's base URL, e.g. ``http://127.0.0.1:8080``, or several
    (a list or a comma-separated string): any of them can answer.
    """

    def __init__(
        self, url: Bootstrap, *, request_timeout_ms: int = 30_000, auth: Auth = None
    ) -> None:
        """``auth``: credentials for a secured broker (:mod:`app.client.auth`)."""
        self._cluster = Cluster(url, auth=auth)
        self._client = _http.sync_client(
            self._cluster.default_url,
            request_timeout_ms,
            authorization=self._cluster.authorization,
        )

    def _any(self, call: Call[T]) -> T:
        return _cluster.run_sync(self._client, _cluster.any_route(self._cluster, call))

    def _group(self, group: str, call: Call[T]) -> T:
        return _cluster.run_sync(
            self._client, _cluster.group_route(self._cluster, group, call, _BACKOFF_S)
        )

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        *,
        replication_factor: int | None = None,
        configs: Mapping[str, Any] | None = None,
    ) -> TopicDescription:
        """Create a topic (``partitions=None``: the broker's ``num_partitions``); TopicAlreadyExists if it exists."""
        return self._any(_create_call(name, partitions, replication_factor, configs or {}))

    def list_topics(self) -> dict[str, int]:
        """Topic name -> partition count."""
        return self._any(_list_call())

    def create_acls(self, acls: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
        """Kafka's CreateAcls: add bindings (``resource_type``, ``resource_name``,
        ``pattern_type``, ``principal``, ``host``, ``operation``, ``permission``)."""
        return self._any(_acls_call("POST", {}, {"acls": [dict(a) for a in acls]}))

    def describe_acls(self, **filters: str | None) -> list[dict[str, str]]:
        """Kafka's DescribeAcls: the bindings a filter selects (the same field names;
        absent: any; ``pattern_type="MATCH"``: every binding applying to a resource)."""
        return self._any(_acls_call("GET", filters))

    def delete_acls(
        self, filters: Sequence[Mapping[str, str | None]] | None = None, **filter: str | None
    ) -> list[dict[str, str]]:
        """Kafka's DeleteAcls: remove the bindings the filter selects (keyword arguments,
        as :meth:`describe_acls`), or any of several ``filters`` (dicts of the same fields)
        in one change; the removed ones."""
        return self._any(_delete_acls_call(filters, filter))

    def describe_client_quotas(
        self, user: str | None = None, client_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Kafka's DescribeClientQuotas: ``[{"entity": [{"entity_type": "user",
        "entity_name": "alice"}], "values": {"producer_byte_rate": 1048576.0}}]`` for the
        entities matching ``user`` / ``client_id`` (None: any; ``"<default>"``: the
        default entity)."""
        return self._any(_quotas_call("GET", {"user": user, "client_id": client_id}))

    def alter_client_quotas(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Kafka's AlterClientQuotas: ``[{"entity": [...], "ops": [{"key":
        "producer_byte_rate", "value": 1048576}, {"key": "request_rate", "remove": True}]}]``;
        answers the altered entities' quotas."""
        return self._any(_quotas_call("POST", {}, {"entries": [dict(e) for e in entries]}))

    def describe_topic(self, name: str) -> TopicDescription:
        return self._any(_describe_call(name))

    def delete_topic(self, name: str) -> None:
        self._any(_delete_call(name))

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: str | int = "latest",
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """``earliest``, ``latest`` (the high watermark) or the first offset at/after a timestamp (ms).

        ``None`` for a partition with no record at or after the timestamp.
        For ``earliest``/``latest`` the timestamp is -1. With
        ``isolation_level="read_committed"`` (Kafka's ListOffsets), ``latest`` is the
        last stable offset and a timestamp finds only offsets below it.
        """
        routes = _list_offsets_routes(self._cluster, partitions, spec, isolation_level)
        return {tp: _cluster.run_sync(self._client, route) for tp, route in routes}

    def list_groups(self) -> list[GroupListing]:
        """Every group; in a cluster each broker lists the groups it coordinates, so all are asked."""
        if not self._cluster.is_multi():
            return self._any(_list_groups_call())
        _cluster.run_sync(self._client, _cluster.refresh_route(self._cluster, ()))
        found = [
            _http.run_sync(self._client, _list_groups_call(), url)
            for url in self._cluster.broker_urls()
        ]
        return _merge_groups(found)

    def describe_group(self, group: str) -> dict[str, Any]:
        """The broker's description: state, epochs, members with assignments, offsets and lag."""
        return self._group(group, _describe_group_call(group))

    def list_group_offsets(self, group: str, topic: str | None = None) -> dict[TopicPartition, int]:
        """The group's committed offsets (the next offset to read), optionally for one topic."""
        return self._group(group, _group_offsets_call(group, topic))

    def reset_group_offsets(
        self,
        group: str,
        topic: str,
        to: ResetTo,
        value: int | None = None,
        *,
        partitions: Iterable[int] | None = None,
    ) -> dict[TopicPartition, int]:
        """Reset an empty group's offsets to earliest, latest, a timestamp or an offset (``value``)."""
        return self._group(group, _reset_call(group, topic, to, value, partitions))

    def delete_group(self, group: str) -> None:
        """Delete an empty group and its offsets (NonEmptyGroup while it has members)."""
        self._group(group, _delete_group_call(group))

    def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int | None = None,
    ) -> list[dict[str, Any]]:
        """Kafka's ListTransactions: ``{transactional_id, producer_id, transaction_state}``
        of every id (filtered by Kafka's state names, producer ids, and transactions
        running longer than ``duration_ms``); in a cluster every broker is asked."""
        call = _list_transactions_call(states, producer_ids, duration_ms)
        if not self._cluster.is_multi():
            return _merge_transactions([self._any(call)])
        _cluster.run_sync(self._client, _cluster.refresh_route(self._cluster, ()))
        found = [_http.run_sync(self._client, call, url) for url in self._cluster.broker_urls()]
        return _merge_transactions(found)

    def describe_transaction(self, transactional_id: str) -> dict[str, Any]:
        """Kafka's DescribeTransactions, from the id's coordinator: state, producer id and
        epoch, timeout, start time and partitions."""
        route = _txn_route(
            self._cluster, transactional_id, _describe_transaction_call(transactional_id)
        )
        return _cluster.run_sync(self._client, route)

    def abort_transaction(
        self,
        transactional_id: str,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
    ) -> dict[str, Any]:
        """Abort the id's open transaction (EndTxn abort, as its producer would), with the
        given producer id and epoch or, without them, the current ones. The producer that
        owned it then finds its transaction gone (INVALID_TXN_STATE)."""
        route = _abort_route(self._cluster, transactional_id, producer_id, producer_epoch)
        return _cluster.run_sync(self._client, route)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncAdmin:
    """The asyncio twin of :class:`Admin`."""

    def __init__(
        self,
        url: Bootstrap,
        *,
        request_timeout_ms: int = 30_000,
        transport: httpx.AsyncBaseTransport | None = None,
        auth: Auth = None,
    ) -> None:
        self._cluster = Cluster(url, auth=auth)
        self._client = _http.async_client(
            self._cluster.default_url,
            request_timeout_ms,
            transport=transport,
            authorization=self._cluster.authorization,
        )

    async def _any(self, call: Call[T]) -> T:
        return await _cluster.run_async(self._client, _cluster.any_route(self._cluster, call))

    async def _group(self, group: str, call: Call[T]) -> T:
        return await _cluster.run_async(
            self._client, _cluster.group_route(self._cluster, group, call, _BACKOFF_S)
        )

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        *,
        replication_factor: int | None = None,
        configs: Mapping[str, Any] | None = None,
    ) -> TopicDescription:
        return await self._any(_create_call(name, partitions, replication_factor, configs or {}))

    async def list_topics(self) -> dict[str, int]:
        return await self._any(_list_call())

    async def create_acls(self, acls: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
        """:meth:`Admin.create_acls`."""
        return await self._any(_acls_call("POST", {}, {"acls": [dict(a) for a in acls]}))

    async def describe_acls(self, **filters: str | None) -> list[dict[str, str]]:
        """:meth:`Admin.describe_acls`."""
        return await self._any(_acls_call("GET", filters))

    async def delete_acls(
        self, filters: Sequence[Mapping[str, str | None]] | None = None, **filter: str | None
    ) -> list[dict[str, str]]:
        """:meth:`Admin.delete_acls`."""
        return await self._any(_delete_acls_call(filters, filter))

    async def describe_client_quotas(
        self, user: str | None = None, client_id: str | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`Admin.describe_client_quotas`."""
        return await self._any(_quotas_call("GET", {"user": user, "client_id": client_id}))

    async def alter_client_quotas(
        self, entries: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """:meth:`Admin.alter_client_quotas`."""
        return await self._any(_quotas_call("POST", {}, {"entries": [dict(e) for e in entries]}))

    async def describe_topic(self, name: str) -> TopicDescription:
        return await self._any(_describe_call(name))

    async def delete_topic(self, name: str) -> None:
        await self._any(_delete_call(name))

    async def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: str | int = "latest",
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """:meth:`Admin.list_offsets`."""
        routes = _list_offsets_routes(self._cluster, partitions, spec, isolation_level)
        return {tp: await _cluster.run_async(self._client, route) for tp, route in routes}

    async def list_groups(self) -> list[GroupListing]:
        if not self._cluster.is_multi():
            return await self._any(_list_groups_call())
        await _cluster.run_async(self._client, _cluster.refresh_route(self._cluster, ()))
        found = [
            await _http.run_async(self._client, _list_groups_call(), url)
            for url in self._cluster.broker_urls()
        ]
        return _merge_groups(found)

    async def describe_group(self, group: str) -> dict[str, Any]:
        return await self._group(group, _describe_group_call(group))

    async def list_group_offsets(
        self, group: str, topic: str | None = None
    ) -> dict[TopicPartition, int]:
        return await self._group(group, _group_offsets_call(group, topic))

    async def reset_group_offsets(
        self,
        group: str,
        topic: str,
        to: ResetTo,
        value: int | None = None,
        *,
        partitions: Iterable[int] | None = None,
    ) -> dict[TopicPartition, int]:
        return await self._group(group, _reset_call(group, topic, to, value, partitions))

    async def delete_group(self, group: str) -> None:
        await self._group(group, _delete_group_call(group))

    async def list_transactions(
        self,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_ms: int | None = None,
    ) -> list[dict[str, Any]]:
        call = _list_transactions_call(states, producer_ids, duration_ms)
        if not self._cluster.is_multi():
            return _merge_transactions([await self._any(call)])
        await _cluster.run_async(self._client, _cluster.refresh_route(self._cluster, ()))
        found = [
            await _http.run_async(self._client, call, url) for url in self._cluster.broker_urls()
        ]
        return _merge_transactions(found)

    async def describe_transaction(self, transactional_id: str) -> dict[str, Any]:
        route = _txn_route(
            self._cluster, transactional_id, _describe_transaction_call(transactional_id)
        )
        return await _cluster.run_async(self._client, route)

    async def abort_transaction(
        self,
        transactional_id: str,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
    ) -> dict[str, Any]:
        route = _abort_route(self._cluster, transactional_id, producer_id, producer_epoch)
        return await _cluster.run_async(self._client, route)

    async def close(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncAdmin:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
