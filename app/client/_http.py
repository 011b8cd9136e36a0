"""JSON calls to the broker, described once and run by a sync or an asyncio httpx client.

A call is a plain :class:`Call` (method, path, query, body, how to read the
answer), so the admin client, the producer's metadata lookups and the
consumer's offset lookups are written once for both flavours.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
import orjson

from app.client.errors import BrokerUnavailable, NetworkTimeout, error_from_body
from app.common import tls

T = TypeVar("T")

USER_AGENT = "logbus-python"


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return url


def topic_path(topic: str) -> str:
    """``/topics/<topic>``: the one place the SDK and the CLI build a topic's URL path."""
    # Topic names are [a-zA-Z0-9._-]; quoting still keeps a bad name from forming another path.
    return f"/topics/{quote(topic, safe='')}"


def group_path(group: str) -> str:
    """``/groups/<group>``: group ids are free text, so they are always quoted."""
    return f"/groups/{quote(group, safe='')}"


def txn_path(transactional_id: str, rest: str = "") -> str:
    """``/transactions/<id><rest>``: transactional ids are free text, so always quoted."""
    return f"/transactions/{quote(transactional_id, safe='')}{rest}"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, str | int] = field(default_factory=dict)
    json: Any = None
    # Statuses answered without a JSON body (204) are parsed from None.
    empty_ok: bool = False
    # A binary body instead of ``json`` (RecordBatch v2 bytes for ``POST .../batches``).
    content: bytes | None = None
    content_type: str = "application/octet-stream"
    # How an error answer becomes an exception (default: a Logbus error body); the schema
    # registry client reads Confluent's bodies (app/client/schema_registry.py).
    errors: Callable[[int, bytes], Exception] | None = None


def _finish(call: Call[T], response: httpx.Response) -> T:
    if response.status_code >= 300:
        if call.errors is not None:
            raise call.errors(response.status_code, response.content)
        raise error_from_body(response.status_code, response.content)
    if not response.content:
        return call.parse(None)
    return call.parse(orjson.loads(response.content))


def _request_args(call: Call[Any]) -> dict[str, Any]:
    args: dict[str, Any] = {"params": call.params or None}
    if call.json is not None:
        args["content"] = orjson.dumps(call.json)
        json_type = call.content_type if call.content_type.endswith("json") else "application/json"
        args["headers"] = {"content-type": json_type}
    elif call.content is not None:
        args["content"] = call.content
        args["headers"] = {"content-type": call.content_type}
    return args


def transport_error(exc: httpx.HTTPError, url: str) -> Exception:
    """A connection-level failure as the SDK's retriable error."""
    if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
        return NetworkTimeout(f"no answer from {url} in time: {type(exc).__name__}")
    error = BrokerUnavailable(f"cannot reach the broker at {url}: {type(exc).__name__}: {exc}")
    # Refused or timed out while connecting: the request surely never reached the broker.
    error.connect_failed = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
    return error


def run_sync(client: httpx.Client, call: Call[T], base: str | None = None) -> T:
    """Run ``call`` on ``client``: at its base URL, or at the broker ``base`` if given."""
    where = str(client.base_url) if base is None else base
    target = call.path if base is None else base + call.path
    try:
        response = client.request(call.method, target, **_request_args(call))
    except httpx.HTTPError as exc:
        raise transport_error(exc, where) from exc
    return _finish(call, response)


async def run_async(client: httpx.AsyncClient, call: Call[T], base: str | None = None) -> T:
    where = str(client.base_url) if base is None else base
    target = call.path if base is None else base + call.path
    try:
        response = await client.request(call.method, target, **_request_args(call))
    except httpx.HTTPError as exc:
        raise transport_error(exc, where) from exc
    return _finish(call, response)


def timeout_config(request_timeout_ms: int) -> httpx.Timeout:
    seconds = request_timeout_ms / 1000
    return httpx.Timeout(seconds, connect=min(seconds, 10.0))


def _ssl_context() -> ssl.SSLContext:
    """The process's client TLS context (:mod:`app.common.tls`), shared by every client.

    Built once per distinct set of options (loading the CA bundle costs ~75 ms,
    which httpx would pay in each client's constructor, even for a plain
    ``http://`` broker: a Spark task opening one Consumer paid it).
    """
    return tls.default_context()


CLIENT_ID_HEADER = "logbus-client-id"
# Kafka's client.id for every SDK client of the process (quotas may name it).
CLIENT_ID_ENV = "LOGBUS_CLIENT_ID"


def _client_options(
    url: str, request_timeout_ms: int, max_connections: int, authorization: str | None
) -> dict[str, Any]:
    """What the blocking and the asyncio httpx clients of the SDK are built with."""
    headers = {"user-agent": USER_AGENT}
    if authorization is not None:
        headers["authorization"] = authorization
    # Kafka's client.id: the broker's quotas may name it (README "Quotas").
    client_id = os.environ.get(CLIENT_ID_ENV)
    if client_id:
        headers[CLIENT_ID_HEADER] = client_id
    return {
        "base_url": normalize_url(url),
        "verify": _ssl_context(),
        "timeout": timeout_config(request_timeout_ms),
        "headers": headers,
        "limits": httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
    }


def sync_client(
    url: str,
    request_timeout_ms: int,
    max_connections: int = 100,
    authorization: str | None = None,
) -> httpx.Client:
    return httpx.Client(**_client_options(url, request_timeout_ms, max_connections, authorization))


def async_client(
    url: str,
    request_timeout_ms: int,
    max_connections: int = 100,
    transport: httpx.AsyncBaseTransport | None = None,
    authorization: str | None = None,
) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        **_client_options(url, request_timeout_ms, max_connections, authorization),
        transport=transport,
    )


# ---- the calls -------------------------------------------------------------


def partition_count_call(topic: str) -> Call[int]:
    return Call("GET", topic_path(topic), lambda body: len(body["partitions"]))


def describe_topic_call(topic: str) -> Call[dict[str, Any]]:
    return Call("GET", topic_path(topic), lambda body: dict(body))


def list_offset_call(
    topic: str, partition: int, at: str | int, isolation_level: str = "read_uncommitted"
) -> Call[tuple[int, int]]:
    """ListOffsets; under ``read_committed`` ``latest`` is the last stable offset."""
    params: dict[str, Any] = {"at": at}
    if isolation_level != "read_uncommitted":
        params["isolation_level"] = isolation_level
    return Call(
        "GET",
        f"{topic_path(topic)}/partitions/{partition}/offsets",
        lambda body: (int(body["offset"]), int(body["timestamp"])),
        params=params,
    )


def init_producer_call() -> Call[tuple[int, int]]:
    return Call(
        "POST",
        "/producers",
        lambda body: (int(body["producer_id"]), int(body["producer_epoch"])),
        json={},
    )
