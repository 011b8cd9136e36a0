"""The FastAPI application: routers, error mapping, metrics, lifespan, OpenAPI."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.middleware.cors import CORSMiddleware

from app.api import errors, openapi_docs, quotas, security, ws
from app.api.edge import EdgeApp, EdgeMiddleware
from app.api.lean_route import HotRoutes
from app.api.metrics import PartitionCollector
from app.api.routers import ALL
from app.api.routers import acls as acl_routes
from app.api.routers import groups as group_routes
from app.api.routers import schema_registry as registry_routes
from app.api.routers import transactions as txn_routes
from app.api.state import AppState
from app.config import Settings
from app.core.replication.config import ReplicaConfig

if TYPE_CHECKING:
    from app.core.log.manager import LogManager
    from app.core.topology import Topology

DESCRIPTION = """A Kafka-style partitioned commit log over HTTP.

Records are stored as Kafka RecordBatch v2; keys are placed with Kafka's murmur2
partitioner. Every error answers `{"error_code", "message", "retriable", ...}` where
`error_code` is the Kafka error name; bad input is always a 4xx.

WebSocket endpoints (`/ws/subscribe`: records pushed as they are appended, with
credit-based flow control; `/ws/produce`: a stream of produce requests) are
described in AsyncAPI 3.0 at [/asyncapi.yaml](/asyncapi.yaml)
(`openapi/asyncapi.yaml` in the repository)."""


def _version() -> str:
    try:
        return version("logbus")
    except PackageNotFoundError:
        return "0.0.0"


def operation_id(route: APIRoute) -> str:
    """A route's OpenAPI ``operationId``: its endpoint function's name in camelCase.

    Generated clients use it as the method name (``produce``, ``fetchRecords``,
    ``createTopic``, ``commitOffsets``), so endpoint functions are named as the verb a
    client calls; FastAPI's default (``produce_topics__topic__records_post``) repeats the
    path and the method. A test keeps the ids unique.
    """
    head, *rest = route.name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def replica_config(settings: Settings) -> ReplicaConfig:
    """What cluster mode reads of the settings (``app/core`` never reads them itself)."""
    return ReplicaConfig(
        zookeeper=settings.zookeeper or "",
        broker_id=settings.broker_id,
        url=settings.url,
        kafka_listener=settings.kafka_advertised,
        zookeeper_session_timeout_ms=settings.zookeeper_session_timeout_ms,
        replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
        replica_fetch_wait_max_ms=settings.replica_fetch_wait_max_ms,
        replica_fetch_max_bytes=settings.replica_fetch_max_bytes,
        default_replication_factor=settings.default_replication_factor,
        unclean_leader_election_enable=settings.unclean_leader_election_enable,
        leader_imbalance_check_interval_ms=settings.leader_imbalance_check_interval_ms,
        inter_broker_tls=settings.inter_broker_tls,
        inter_broker_ca_file=_path(settings.inter_broker_ca_file),
        ssl_ca_file=_path(settings.ssl_ca_file),
        ssl_certfile=_path(settings.ssl_certfile),
        ssl_keyfile=_path(settings.ssl_keyfile),
    )


def _topology(settings: Settings, manager: LogManager, state: AppState) -> Topology:
    """The broker's topology: a cluster's through ZooKeeper (``--zookeeper``), else a
    lone broker's over its logs. The one place that tells the two apart for partitions;
    the ACL and quota stores make the same choice where they are built
    (``app/api/security.py``, ``app/api/quotas.py``: ZooKeeper or a file)."""
    if settings.zookeeper:
        from app.core.replication.manager import ReplicaManager

        config = replica_config(settings)
        return ReplicaManager(config, manager, state.waiters.notify)
    from app.core.local_topology import LocalTopology

    return LocalTopology(manager, settings.broker_id, settings.url)


def _path(value: object) -> str | None:
    return None if value is None else str(value)


def _topic_exists(state: AppState, topic: str) -> bool:
    from app.common.errors import LogbusError

    try:
        state.topology.partition_count(topic)
    except LogbusError:
        return False
    return True


def create_app(settings: Settings, manager: LogManager | None = None) -> FastAPI:
    """The HTTP app. Without ``manager`` it owns one: started and stopped by the lifespan.

    A ``manager`` passed in is the caller's to start and stop; the app serves
    it as soon as it is built.
    """
    owns = manager is None
    state = AppState(settings=settings, manager=manager, owns_manager=owns, ready=not owns)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if state.owns_manager:
            from app.core.log.cleaner import CleanerConfig
            from app.core.log.manager import LogManager

            owned = LogManager(
                settings.data_dir,
                settings.log_config,
                retention_check_interval_ms=settings.log_retention_check_interval_ms,
                cleaner_config=CleanerConfig(backoff_ms=settings.log_cleaner_backoff_ms),
                flush_scheduler_interval_ms=settings.log_flush_scheduler_interval_ms,
                broker_id=settings.broker_id,
                producer_id_expiration_ms=settings.producer_id_expiration_ms,
                partition_budget=settings.partition_budget,
            )
            # Loading and recovering logs reads files: keep the loop free meanwhile.
            await asyncio.to_thread(owned.start)
            state.manager = owned
        if not state.has_topology and state.manager is not None:
            topology = _topology(settings, state.manager, state)
            await topology.start()
            state.topology = topology
        guard = app.state.logbus_security
        if guard is not None:
            await guard.start()
        await app.state.logbus_quotas.start()
        # Groups are served from the cache the coordinator rebuilds from __consumer_offsets.
        await group_routes.start_coordinator(app, state)
        # Transactions commit group offsets: after the group coordinator.
        await txn_routes.start_coordinator(app, state)
        # The Kafka door (app/kafka): the same state, logs and coordinators as HTTP.
        kafka = None
        scram = None
        if settings.kafka_listener:
            from app.kafka import security as kafka_security
            from app.kafka.listener import KafkaListener

            # Its SCRAM credentials: ZooKeeper's in a cluster, else the users file's.
            scram = kafka_security.scram_store(settings)
            await asyncio.to_thread(scram.start)
            kafka = KafkaListener(
                state,
                lambda: getattr(app.state, "txn_coordinator", None),
                lambda: getattr(app.state, "coordinator", None),
                kafka_security.build(settings, guard, scram),
                app.state.logbus_quotas,
                scram,
            )
            await kafka.start()
        app.state.kafka_listener = kafka
        # The schema registry, rebuilt from this broker's replica of _schemas.
        await registry_routes.start_registry(app, state)
        state.ready = True
        try:
            yield
        finally:
            state.ready = False
            if kafka is not None:
                await kafka.stop()
            if scram is not None:
                await asyncio.to_thread(scram.close)
            state.waiters.close()
            await registry_routes.stop_registry(app)
            await txn_routes.stop_coordinator(app)
            await group_routes.stop_coordinator(app)
            if app.state.logbus_security is not None:
                await app.state.logbus_security.stop()
            await app.state.logbus_quotas.stop()
            held = state.drop_topology()
            if held is not None:
                await held.stop()
            if state.owns_manager and state.manager is not None:
                await asyncio.to_thread(state.manager.shutdown)
                state.manager = None

    # FastAPI, with produce and fetch entering at the edge middleware (app/api/edge.py).
    app = EdgeApp(
        title="Logbus",
        version=_version(),
        description=DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=operation_id,
        # /docs is served below from local assets; ReDoc only exists on a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.logbus = state
    install_offline_docs(app)
    state.registry.register(PartitionCollector(state))
    errors.install(app)
    app.state.logbus_quotas = quota_state = quotas.build(settings)
    app.state.logbus_security = guard = security.build(settings)
    secured = None
    if guard is not None:
        secured = partial(
            security.SecurityMiddleware,
            security=guard,
            openapi=lambda: app.openapi(),
            verify_broker=lambda broker, credential: state.topology.authorize_follower(
                broker, credential
            ),
            topic_exists=lambda topic: _topic_exists(state, topic),
        )
    # Produce and fetch are looked up before FastAPI walks every router (app/api/lean_route.py).
    hot = HotRoutes(app.router)
    # Metrics, origins, security (outside quotas, which need the principal, and outside
    # the media-type rules: a request without valid credentials learns nothing), quotas,
    # request rules and the hot routes' dispatch, in one layer (app/api/edge.py).
    app.add_middleware(
        EdgeMiddleware,
        origins=settings.cors_allowed_origins,
        quotas=quota_state,
        openapi=lambda: app.openapi(),
        hot=hot,
        security=secured,
    )
    if settings.cors_allowed_origins:
        # Outermost: preflights are answered and every answer (errors too) carries the
        # Access-Control-* headers an allowed page needs to read it.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_allowed_origins,
            allow_methods=settings.cors_allowed_methods,
            allow_headers=settings.cors_allowed_headers,
            allow_credentials=settings.cors_allow_credentials,
            expose_headers=[
                "Logbus-High-Watermark",
                "Logbus-Log-Start-Offset",
                "Logbus-Log-End-Offset",
                "Logbus-Throttle-Time-Ms",
            ],
        )
    for router in (
        *ALL,
        group_routes.router,
        txn_routes.router,
        acl_routes.router,
        quotas.router,
        registry_routes.router,
    ):
        app.include_router(router)
    app.router.routes.insert(0, hot)
    ws.install(app, state)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


DOCS_ASSETS = "/docs-assets"


def install_offline_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from the ``swagger-ui-bundle`` package, so it works offline.

    FastAPI's default page loads its script and stylesheet from a public CDN:
    a broker on an isolated network showed a blank page, and every visit told
    the CDN who reads the docs. The assets are mounted at :data:`DOCS_ASSETS`.
    """
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles
    from swagger_ui_bundle import swagger_ui_path

    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )

    app.add_api_route("/docs", docs, include_in_schema=False)


def build_openapi(app: FastAPI) -> dict[str, Any]:
    spec = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    schemas: dict[str, Any] = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in (*openapi_docs.BODY_MODELS, *txn_routes.BODY_MODELS):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas[model.__name__] = schema
    # Validation errors answer 400 with the ErrorBody, never FastAPI's 422. Every
    # operation may answer 400 (a repeated query parameter, app.api.guards) and every
    # one with a body 415 (a body of another media type).
    for path_item in spec.get("paths", {}).values():
        for operation in path_item.values():
            if isinstance(operation, dict):
                responses = operation.setdefault("responses", {})
                # The schema registry answers Confluent's 422s (its own error docs), a
                # typed produce its INVALID_RECORD (app.api.errors.ERROR_DOCS[422]).
                fastapis = responses.get("422", {}).get("description") == "Validation Error"
                if registry_routes.TAG not in operation.get("tags", ()) and fastapis:
                    responses.pop("422", None)
                statuses = [400, 415] if "requestBody" in operation else [400]
                # With authentication and an authorizer on (app/api/security.py).
                if operation.get("operationId") not in ("healthz", "readyz"):
                    statuses += [401, 403]
                for status, doc in errors.error_responses(*statuses).items():
                    responses.setdefault(str(status), _openapi_response(doc))
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return spec


def _openapi_response(doc: dict[str, Any]) -> dict[str, Any]:
    """An ``errors.ERROR_DOCS`` entry as an OpenAPI response object (the ErrorBody schema)."""
    content = {
        media: {**entry, "schema": {"$ref": "#/components/schemas/ErrorBody"}}
        for media, entry in doc["content"].items()
    }
    return {"description": doc["description"], "content": content}
