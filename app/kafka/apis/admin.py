"""The admin APIs: CreateTopics, DeleteTopics, DescribeConfigs, DescribeLogDirs, on the
topology and log manager HTTP's ``/topics`` routes use.

CreateTopics and DeleteTopics go through :mod:`app.api.topic_service` (the rules HTTP's
``POST /topics`` and ``DELETE /topics/{t}`` apply: -1 is the broker's default, internal
topics cannot be deleted; the checks are the topology's, ``validate_only`` included), so a
topic created through either door is listed and described through the other. Errors are
per topic (per resource), Kafka's codes by the error's Kafka name.

DescribeConfigs: a topic's configs are the topology's (:meth:`Topology.topic_configs`:
a lone broker's logs', a cluster's ZooKeeper assignment's; Kafka's names, those Logbus
keeps: ``GET /topics/{t}``'s ``configs``), overrides reported as DYNAMIC_TOPIC_CONFIG and
the rest as DEFAULT_CONFIG; the broker resource lists a few of the broker's settings
under Kafka's names, read-only (they are start-time settings; nothing alters them at
run time). AlterConfigs and IncrementalAlterConfigs change a topic's overrides through
:meth:`Topology.alter_topic_config` (in a cluster: written to the topic's ZooKeeper
assignment and applied by every broker). DeleteRecords moves a partition's log start
offset through :meth:`Topology.delete_records` (in a cluster the followers follow it, and
the answer's low watermark is Kafka's: the smallest start over the live replicas and the
ISR members, live or not, once it reached the new start, within the request's
``timeout_ms``). CreatePartitions grows a topic through :meth:`Topology.create_partitions`
(in a cluster the new replicas are placed over the live brokers and the answer waits up
to the request's ``timeout_ms`` for their leaders, as CreateTopics does for a new
topic's).

DescribeLogDirs: the broker's one data directory and, per partition it holds (leader or
follower), the bytes of its segments; ``offset_lag`` 0 (no future replicas, KIP-113's
moves between directories, exist here).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from app.api import topic_service
from app.common.errors import (
    InvalidConfig,
    InvalidRequest,
    LogbusError,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from app.core.log.topic_rules import check_new_topic
from app.core.security.acl import Operation, ResourceType
from app.core.topology import NewTopic, topic_id_text
from app.kafka import authorize
from app.kafka.apis.base import (
    NO_THROTTLE,
    ZERO_UUID,
    Context,
    TopicIdNames,
    partition_answers,
    response_module,
)
from app.kafka.encode import answered, build, error_code
from app.kafka.versions import (
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    DESCRIBE_LOG_DIRS,
    INCREMENTAL_ALTER_CONFIGS,
)

# Kafka's ConfigResource types and DescribeConfigs' config sources and types.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
_CONFIG_TYPES = {bool: 1, str: 2, int: 5, float: 6}  # BOOLEAN, STRING, LONG, DOUBLE


def config_string(value: object) -> str:
    """A config value as Kafka writes it (booleans in lower case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- CreateTopics / DeleteTopics -----------------------------------------------------------


def _check_entry(t: Any, names: list[str], advice: str = "") -> None:
    """What CreateTopics and CreatePartitions refuse in a topic's entry (INVALID_REQUEST):
    a topic the request names twice (``names``: every entry's), manual replica
    assignments (the broker places replicas; ``advice`` says what to give instead)."""
    if names.count(t.name) > 1:
        raise InvalidRequest(f"topic {t.name!r} is named more than once in the request")
    if t.assignments:
        raise InvalidRequest(
            f"manual replica assignments are not supported: the broker places replicas{advice}"
        )


async def create_topics(ctx: Context, body: Any, version: int) -> Any:
    """Each topic created (or, ``validate_only``, checked) as ``POST /topics`` creates it;
    a name given twice is INVALID_REQUEST, manual replica assignments are not served
    (INVALID_REQUEST: the topology places replicas). From v5 a created topic's answer
    carries its partitions, replication factor and configs. In a cluster each waits up to
    the request's ``timeout_ms`` for its partitions' leaders (REQUEST_TIMED_OUT after it:
    the topic was created, and gets leaders later); a timeout of 0 or below answers at
    once after the write, as Kafka."""
    m = response_module(CREATE_TOPICS, version)
    state = ctx.state
    validate_only = bool(getattr(body, "validate_only", False))
    timeout_ms = max(0, int(body.timeout.total_seconds() * 1000))
    names = [t.name for t in body.topics]

    async def one(t: Any) -> Any:
        described: dict[str, Any] = {}
        with answered() as outcome:
            if not authorize.permitted(ctx, Operation.CREATE, None):
                authorize.check(ctx, Operation.CREATE, ResourceType.TOPIC, t.name)
            _check_entry(t, names, " (give num_partitions and replication_factor)")
            configs: dict[str, object] = {}
            for c in t.configs:
                if c.value is None:
                    raise InvalidConfig(c.name, None, "a config needs a value")
                configs[c.name] = c.value
            topic = topic_service.new_topic(
                state,
                t.name,
                int(t.num_partitions),
                int(t.replication_factor),
                configs,
                validate_only=validate_only,
            )
            await topic_service.create_topic(state, topic, timeout_ms=timeout_ms)
            if validate_only:
                described = {"num_partitions": topic.partitions}
            else:
                described = _created(ctx, m, topic)
        return build(
            m.CreatableTopicResult,
            name=t.name,
            topic_id=ZERO_UUID,
            error_code=outcome.code,
            error_message=outcome.message,
            topic_config_error_code=ErrorCode.none,
            num_partitions=described.get("num_partitions", -1),
            replication_factor=described.get("replication_factor", -1),
            configs=described.get("configs"),
        )

    results = [await one(t) for t in body.topics]
    return build(m.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


def _created(ctx: Context, m: Any, topic: NewTopic) -> dict[str, Any]:
    """What a v5+ CreateTopics answer says of a topic just created: this broker's view of
    it, or, asked not to wait (timeout 0) in a cluster and not seen here yet, what was
    written (the request's partitions, replication factor and configs), as Kafka answers
    from the assignment it wrote."""
    manager = ctx.state.manager
    assert manager is not None
    topology = ctx.state.topology
    name = topic.name
    try:
        count = topology.partition_count(name)
        rf = len(topology.partition_info(name, 0)["replicas"])
        configs = _topic_configs(ctx, name)
    except UnknownTopicOrPartition:
        count = topic.partitions
        rf = topic.replication_factor or ctx.state.settings.default_replication_factor
        config, overrides = check_new_topic(
            name, topic.partitions, topic.configs, manager.default_config
        )
        configs = [
            (key, value, DYNAMIC_TOPIC_CONFIG if key in overrides else DEFAULT_CONFIG)
            for key, value in sorted(config.to_kafka().items())
        ]
    return {
        "num_partitions": count,
        "replication_factor": rf,
        "configs": tuple(
            _config_entry(m.CreatableTopicConfigs, key, value, source, read_only=False)
            for key, value, source in configs
        )
        if hasattr(m, "CreatableTopicConfigs")
        else None,
    }


async def create_partitions(ctx: Context, body: Any, version: int) -> Any:
    """Each topic grown to its new count (or, ``validate_only``, checked) through
    :func:`app.api.topic_service.create_partitions`: INVALID_PARTITIONS unless the count
    grows, manual assignments INVALID_REQUEST (the broker places replicas), a topic named
    twice INVALID_REQUEST. In a cluster each waits up to the request's ``timeout_ms`` for
    the new partitions' leaders (REQUEST_TIMED_OUT after it: they were made, and get
    leaders later); a timeout of 0 or below answers at once after the write, as Kafka."""
    m = response_module(CREATE_PARTITIONS, version)
    names = [t.name for t in body.topics]
    timeout_ms = max(0, int(body.timeout.total_seconds() * 1000))
    results = []
    for t in body.topics:
        with answered() as outcome:
            authorize.check(ctx, Operation.ALTER, ResourceType.TOPIC, t.name)
            _check_entry(t, names)
            await topic_service.create_partitions(
                ctx.state,
                t.name,
                int(t.count),
                validate_only=bool(body.validate_only),
                timeout_ms=timeout_ms,
            )
        results.append(
            build(
                m.CreatePartitionsTopicResult,
                name=t.name,
                error_code=outcome.code,
                error_message=outcome.message,
            )
        )
    return build(m.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


async def delete_topics(ctx: Context, body: Any, version: int) -> Any:
    """Each topic deleted as ``DELETE /topics/{t}`` deletes it (internal topics refused,
    INVALID_TOPIC_EXCEPTION; an unknown one UNKNOWN_TOPIC_OR_PARTITION). v6 names topics
    by name or by id (:meth:`Topology.topic_named_by`; an unknown id UNKNOWN_TOPIC_ID, a
    topic named by id that the principal may not DELETE TOPIC_AUTHORIZATION_FAILED with
    its name left null); each result carries the deleted topic's id."""
    m = response_module(DELETE_TOPICS, version)
    if hasattr(body, "topics"):
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    topology = ctx.state.topology
    ids = TopicIdNames(topology)  # thousands of unknown ids cost one pass over the topics
    results = []
    for name, topic_id in wanted:
        by_id = name is None
        with answered() as outcome:
            if by_id:
                asked = topic_id if topic_id is not None else ZERO_UUID
                name = ids.name_of(asked)
                # The map may predate the deletes awaited above: a name whose topic was
                # deleted (and perhaps created again, with another id) since is not this one.
                current = None
                if name is not None:
                    with contextlib.suppress(UnknownTopicOrPartition):
                        current = topology.topic_id(name)
                if current != asked:
                    raise UnknownTopicId(topic_id_text(asked))
            assert name is not None
            authorize.check(ctx, Operation.DELETE, ResourceType.TOPIC, name)
            with contextlib.suppress(LogbusError):  # deleted below: unknown is its error
                topic_id = topology.topic_id(name)
            await topic_service.delete_topic(ctx.state, name)
        if by_id and outcome.code != ErrorCode.none:
            name = None
        results.append(
            build(
                m.DeletableTopicResult,
                name=name,
                topic_id=topic_id if topic_id is not None else ZERO_UUID,
                error_code=outcome.code,
                error_message=outcome.message,
            )
        )
    return build(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


# -- DescribeConfigs -----------------------------------------------------------------------


def _topic_configs(ctx: Context, topic: str) -> list[tuple[str, object, int]]:
    """(Kafka name, value, config source) of every config the topic has."""
    config, overrides = ctx.state.topology.topic_configs(topic)  # UnknownTopicOrPartition
    return [
        (key, value, DYNAMIC_TOPIC_CONFIG if key in overrides else DEFAULT_CONFIG)
        for key, value in sorted(config.to_kafka().items())
    ]


def _broker_configs(ctx: Context) -> list[tuple[str, object, int]]:
    """A few of the broker's start-time settings under Kafka's names."""
    s = ctx.state.settings
    found: dict[str, object] = {
        "broker.id": s.broker_id,
        "num.partitions": s.num_partitions,
        "default.replication.factor": s.default_replication_factor,
        "auto.create.topics.enable": s.auto_create_topics_enable,
        "offsets.topic.num.partitions": s.offsets_topic_num_partitions,
        "transaction.state.log.num.partitions": s.transaction_state_log_num_partitions,
        "transaction.max.timeout.ms": s.transaction_max_timeout_ms,
        "socket.request.max.bytes": s.kafka_socket_request_max_bytes,
    }
    return [(k, v, STATIC_BROKER_CONFIG) for k, v in sorted(found.items())]


def _config_entry(cls: Any, key: str, value: object, source: int, read_only: bool) -> Any:
    """One config as DescribeConfigs and CreateTopics v5+ answer it (CreateTopics' entry
    lacks the synonyms, type and documentation: ``build`` leaves them out)."""
    return build(
        cls,
        name=key,
        value=config_string(value),
        read_only=read_only,
        config_source=source,
        is_sensitive=False,
        synonyms=(),
        config_type=_CONFIG_TYPES.get(type(value), 0),
        documentation=None,
    )


async def describe_configs(ctx: Context, body: Any, version: int) -> Any:
    """Each resource's configs (all, or the keys asked for): topics as ``GET /topics/{t}``
    shows them, the broker's own resource (its id, or "" for the cluster default)
    read-only. Other resource types (broker loggers, client metrics, groups) are
    INVALID_REQUEST; another broker's id INVALID_REQUEST (clients send a broker's
    resource to that broker)."""
    m = response_module(DESCRIBE_CONFIGS, version)
    results = []
    for r in body.resources:
        rtype, rname = int(r.resource_type), r.resource_name
        try:
            _check_config_access(ctx, Operation.DESCRIBE_CONFIGS, rtype, rname)
            if rtype == TOPIC_RESOURCE:
                found, read_only = _topic_configs(ctx, rname), False
            elif rtype == BROKER_RESOURCE:
                if rname not in ("", str(ctx.state.topology.broker_id)):
                    raise InvalidRequest(
                        f"broker {rname!r} is not this broker "
                        f"({ctx.state.topology.broker_id}): ask it"
                    )
                found, read_only = _broker_configs(ctx), True
            else:
                raise InvalidRequest(f"resource type {rtype} is not served (topics 2, brokers 4)")
            keys = None if r.configuration_keys is None else set(r.configuration_keys)
            configs = tuple(
                _config_entry(m.DescribeConfigsResourceResult, key, value, source, read_only)
                for key, value, source in found
                if keys is None or key in keys
            )
            code, message = ErrorCode.none, None
        except LogbusError as exc:
            configs, code, message = (), error_code(exc), exc.message
        results.append(
            build(
                m.DescribeConfigsResult,
                error_code=code,
                error_message=message,
                resource_type=rtype,
                resource_name=rname,
                configs=configs,
            )
        )
    return build(m.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


# -- AlterConfigs / IncrementalAlterConfigs -----------------------------------------------

# IncrementalAlterConfigs' operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
# Kafka's list-typed topic configs (APPEND and SUBTRACT apply to them only).
_LIST_CONFIGS = frozenset({"cleanup.policy"})


def _incremental(current: Mapping[str, object], changes: Any) -> dict[str, object]:
    """The overrides after IncrementalAlterConfigs' operations, in order (a list config's
    APPEND/SUBTRACT start from its current value, its default if not overridden)."""
    out = dict(current)
    for c in changes:
        op, name, value = int(c.config_operation), c.name, c.value
        if op == SET:
            if value is None:
                raise InvalidConfig(name, None, "SET needs a value")
            out[name] = value
        elif op == DELETE:
            out.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            if name not in _LIST_CONFIGS:
                raise InvalidConfig(name, value, "APPEND and SUBTRACT apply to list configs only")
            now = [v for v in str(out.get(name, "")).split(",") if v]
            given = [v.strip() for v in (value or "").split(",") if v.strip()]
            merged = (
                now + [v for v in given if v not in now]
                if op == APPEND
                else [v for v in now if v not in given]
            )
            out[name] = ",".join(merged)
        else:
            raise InvalidRequest(
                f"config operation {op} is not one of SET, DELETE, APPEND, SUBTRACT"
            )
    return out


def _check_config_access(ctx: Context, op: Any, rtype: int, rname: str) -> None:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for the broker."""
    if rtype == TOPIC_RESOURCE:
        authorize.check(ctx, op, ResourceType.TOPIC, rname)
    elif rtype == BROKER_RESOURCE:
        authorize.check(ctx, op, None)


async def _alter(ctx: Context, m: Any, body: Any, response_cls: Any, overrides_of: Any) -> Any:
    """Each resource's new overrides (``overrides_of(resource)``) applied through
    :meth:`Topology.alter_topic_config` (or only checked, ``validate_only``); errors per
    resource. The broker's configs are read-only (INVALID_REQUEST)."""
    validate_only = bool(body.validate_only)
    answers = []
    for r in body.resources:
        rtype, rname = int(r.resource_type), r.resource_name
        with answered() as outcome:
            _check_config_access(ctx, Operation.ALTER_CONFIGS, rtype, rname)
            if rtype == BROKER_RESOURCE:
                raise InvalidRequest(
                    "the broker's configs are start-time settings, read-only through this door"
                )
            if rtype != TOPIC_RESOURCE:
                raise InvalidRequest(f"resource type {rtype} is not served (topics 2)")
            await ctx.state.topology.alter_topic_config(
                rname, overrides_of(r), validate_only=validate_only
            )
        answers.append(
            build(
                m.AlterConfigsResourceResponse,
                error_code=outcome.code,
                error_message=outcome.message,
                resource_type=rtype,
                resource_name=rname,
            )
        )
    return build(response_cls, throttle_time=NO_THROTTLE, responses=tuple(answers))


async def alter_configs(ctx: Context, body: Any, version: int) -> Any:
    """AlterConfigs: a topic's overrides become exactly the configs given (the others
    return to their defaults), as Kafka's legacy API replaces them; checked as CreateTopics
    checks configs (INVALID_CONFIG for a name Logbus does not keep or a bad value)."""
    m = response_module(ALTER_CONFIGS, version)

    def overrides_of(r: Any) -> dict[str, object]:
        out: dict[str, object] = {}
        for c in r.configs:
            if c.value is None:
                raise InvalidConfig(c.name, None, "a config needs a value")
            out[c.name] = c.value
        return out

    return await _alter(ctx, m, body, m.AlterConfigsResponse, overrides_of)


async def incremental_alter_configs(ctx: Context, body: Any, version: int) -> Any:
    """IncrementalAlterConfigs: SET, DELETE (back to the default), and APPEND/SUBTRACT on
    list configs (``cleanup.policy``), applied to the topic's current overrides as the
    topology reads them where they are kept (:meth:`Topology.alter_topic_config` given a
    function: a cluster's ZooKeeper assignment, inside its compare-and-set), not to this
    broker's view, which may not have a change made through another broker yet."""
    m = response_module(INCREMENTAL_ALTER_CONFIGS, version)
    manager = ctx.state.manager
    assert manager is not None
    defaults = manager.default_config.to_kafka()

    def overrides_of(r: Any) -> Callable[[Mapping[str, object]], dict[str, object]]:
        appends = any(int(c.config_operation) in (APPEND, SUBTRACT) for c in r.configs)

        def change(current: Mapping[str, object]) -> dict[str, object]:
            if appends:
                # A list config's current value, default included, is what APPEND starts
                # from.
                current = {**{k: defaults[k] for k in _LIST_CONFIGS}, **current}
            return _incremental(current, r.configs)

        return change

    return await _alter(ctx, m, body, m.IncrementalAlterConfigsResponse, overrides_of)


# -- DeleteRecords -------------------------------------------------------------------------


async def delete_records(ctx: Context, body: Any, version: int) -> Any:
    """Each partition's log start offset moved up to the offset given (-1: the high
    watermark) by its leader (:meth:`Topology.delete_records`); ``low_watermark`` is
    the new log start offset (a cluster's: once every live replica's start reached it,
    Kafka's low watermark). Errors per partition: POLICY_VIOLATION for a topic whose
    cleanup.policy lacks delete (compacted only), OFFSET_OUT_OF_RANGE above the high
    watermark, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, REQUEST_TIMED_OUT (a
    cluster's followers did not all follow within ``timeout_ms``)."""
    m = response_module(DELETE_RECORDS, version)
    timeout_ms = max(0, int(body.timeout.total_seconds() * 1000))

    async def delete(topic: str, partition: int, p: Any) -> dict[str, Any]:
        authorize.check(ctx, Operation.DELETE, ResourceType.TOPIC, topic)
        low = await topic_service.delete_records(
            ctx.state, topic, partition, int(p.offset), timeout_ms=timeout_ms
        )
        return {"low_watermark": low}

    topics = await partition_answers(
        body.topics,
        m.DeleteRecordsTopicResult,
        m.DeleteRecordsPartitionResult,
        delete,
        {"low_watermark": -1},
    )
    return build(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=topics)


# -- DescribeLogDirs -----------------------------------------------------------------------


async def describe_log_dirs(ctx: Context, body: Any, version: int) -> Any:
    """The broker's data directory with the size of each partition replica it holds (of
    the topics asked for; all when ``topics`` is null), and from v4 the directory's total
    and usable bytes. A partition not held here is left out, as Kafka leaves it out."""
    m = response_module(DESCRIBE_LOG_DIRS, version)
    manager = ctx.state.manager
    assert manager is not None
    topology = ctx.state.topology
    if body.topics is None:
        wanted: dict[str, list[int] | None] = dict.fromkeys(topology.topics())
    else:
        wanted = {t.topic: [int(p) for p in t.partitions] for t in body.topics}
    # Kafka: DESCRIBE on the cluster, else the answer is CLUSTER_AUTHORIZATION_FAILED.
    allowed = authorize.permitted(ctx, Operation.DESCRIBE, None)
    if not allowed:
        wanted = {}
    topics = []
    for name, partitions in sorted(wanted.items()):
        held = []
        with contextlib.suppress(UnknownTopicOrPartition):
            count = topology.partition_count(name)
            for p in range(count) if partitions is None else partitions:
                log = topology.replica_log(name, p) if 0 <= p < count else None
                if log is not None:
                    held.append(
                        build(
                            m.DescribeLogDirsPartition,
                            partition_index=p,
                            partition_size=log.size_in_bytes,
                            offset_lag=0,
                            is_future_key=False,
                        )
                    )
        if held:
            topics.append(build(m.DescribeLogDirsTopic, name=name, partitions=tuple(held)))
    usage = await asyncio.to_thread(shutil.disk_usage, manager.data_dir)
    return build(
        m.DescribeLogDirsResponse,
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed,
        results=(
            build(
                m.DescribeLogDirsResult,
                error_code=ErrorCode.none if allowed else ErrorCode.cluster_authorization_failed,
                log_dir=str(manager.data_dir.resolve()),
                topics=tuple(topics),
                total_bytes=usage.total,
                usable_bytes=usage.free,
            ),
        ),
    )
