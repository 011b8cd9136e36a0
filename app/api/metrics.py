"""Prometheus metrics: HTTP traffic (process-wide) and partition offsets (per app).

The HTTP metrics are module-level and live in prometheus_client's default
registry, like ``logbus_zerocopy_bytes_total``: one process serves one app,
and defining them per app would fail with duplicate registration as soon as
a test builds a second app. Partition gauges come from a collector over the
app's own LogManager, registered in the app's private registry; ``/metrics``
renders both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from starlette.types import Scope

from app.common.errors import LogbusError

if TYPE_CHECKING:
    from app.api.state import AppState

REQUESTS = Counter(
    "logbus_http_requests",
    "HTTP requests answered, by method, route template and status.",
    ["method", "route", "status"],
)
LATENCY = Histogram(
    "logbus_http_request_duration_seconds",
    "Time from request start to the end of the response body, by method and route template.",
    ["method", "route"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BYTES_IN = Counter(
    "logbus_http_request_bytes", "Request body bytes received, by route template.", ["route"]
)
BYTES_OUT = Counter(
    "logbus_http_response_bytes",
    "Response body bytes sent (zero-copy file bytes included), by route template.",
    ["route"],
)
# Group commit (app/api/group_commit.py): appends per request is appends / requests.
GROUP_COMMIT_REQUESTS = Counter(
    "logbus_group_commit_requests",
    "Produce requests (HTTP and WebSocket, one partition, appended on the event loop) that "
    "went through group commit.",
)
GROUP_COMMIT_APPENDS = Counter(
    "logbus_group_commit_appends",
    "Log appends group commit made for them (a joined group is one append; a refused "
    "group is retried one request at a time).",
)

UNMATCHED = "<unmatched>"


def route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


def count_request(scope: Scope, status: int, seconds: float, received: int, sent: int) -> None:
    """Count one answered HTTP request by the route it matched, not its raw path (bounded
    labels): its status, its latency from request start to the end of the response body,
    and its body bytes in and out (zero-copy file bytes included). Called by the app's
    edge middleware (app/api/edge.py) outside every check, so refused requests count too."""
    children = _children(scope["method"], route_template(scope), status)
    children.requests.inc()
    children.latency.observe(seconds)
    if received:
        children.bytes_in.inc(received)
    if sent:
        children.bytes_out.inc(sent)


class _Children(NamedTuple):
    requests: Any
    latency: Any
    bytes_in: Any
    bytes_out: Any


# The labelled children of one (method, route, status): ``Counter.labels`` takes a lock
# and builds the label tuple on each call, several microseconds per request on the hot
# path. Bounded like the labels themselves: route templates, methods, statuses.
_CHILDREN: dict[tuple[str, str, int], _Children] = {}


def _children(method: str, route: str, status: int) -> _Children:
    key = (method, route, status)
    found = _CHILDREN.get(key)
    if found is None:
        found = _CHILDREN[key] = _Children(
            REQUESTS.labels(method, route, str(status)),
            LATENCY.labels(method, route),
            BYTES_IN.labels(route),
            BYTES_OUT.labels(route),
        )
    return found


class PartitionCollector(Collector):
    """Offsets of every partition this broker holds, read when scraped."""

    def __init__(self, state: AppState) -> None:
        self.state = state

    def describe(self) -> list[Any]:
        # No describe-time collection: the manager may not be started yet.
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["topic", "partition"]
        start = GaugeMetricFamily(
            "logbus_log_start_offset", "First offset still in the log.", labels=labels
        )
        end = GaugeMetricFamily(
            "logbus_log_end_offset", "Offset the next appended record gets.", labels=labels
        )
        hwm = GaugeMetricFamily(
            "logbus_high_watermark",
            "Last committed offset + 1 (what consumers see).",
            labels=labels,
        )
        topics_gauge = GaugeMetricFamily("logbus_topics", "Topics on this broker.")
        manager = self.state.manager
        count = 0
        if manager is not None and self.state.ready:
            for topic in manager.topics():
                count += 1
                try:
                    # Only the replicas on this broker (all of them unless clustered).
                    for p in manager.hosted_partitions(topic):
                        log = manager.get_log(topic, p)
                        values = [topic, str(p)]
                        start.add_metric(values, log.log_start_offset)
                        end.add_metric(values, log.log_end_offset)
                        hwm.add_metric(values, log.high_watermark)
                except LogbusError:
                    continue  # deleted or offline mid-scrape: it just drops out
        topics_gauge.add_metric([], count)
        yield start
        yield end
        yield hwm
        yield topics_gauge


def render_metrics(state: AppState) -> tuple[bytes, str]:
    return generate_latest(REGISTRY) + generate_latest(state.registry), CONTENT_TYPE_LATEST
