"""Prometheus metrics: HTTP traffic (process-wide) and partition offsets (per app).

The HTTP metrics are module-level and live in prometheus_client's default
registry (one collector, :class:`HttpCollector`, over plain per-label tallies),
like ``logbus_zerocopy_bytes_total``: one process serves one app, and defining
them per app would fail with duplicate registration as soon as a test builds a
second app. Partition gauges come from a collector over the
app's own LogManager, registered in the app's private registry; ``/metrics``
renders both.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector
from starlette.types import Scope

from app.common.errors import LogbusError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from app.core.log.manager import LogManager


class MetricsState(Protocol):
    """What the metrics read of the app's :class:`~app.api.state.AppState` (a protocol:
    the state imports this module's counters, so this module does not import it)."""

    manager: LogManager | None
    ready: bool
    registry: CollectorRegistry


# The HTTP request metrics' buckets (seconds), as a Histogram's ``le`` bounds.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)


class _Tally:
    """What one (method, route template, status) has answered: plain numbers, added to
    on the event loop and read by :class:`HttpCollector` when scraped.

    ``buckets[i]`` counts the requests whose latency fell in bucket ``i`` alone (the last
    is +Inf); the collector makes them cumulative. Not locked: one event loop adds to
    them, and a scrape runs on that loop too (a reader on another thread would at worst
    read a count one request old).
    """

    __slots__ = ("buckets", "bytes_in", "bytes_out", "count", "seconds")

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)
        self.bytes_in = 0
        self.bytes_out = 0


# Bounded like the labels: route templates, methods, statuses.
_TALLIES: dict[tuple[str, str, int], _Tally] = {}


class HttpCollector(Collector):
    """The HTTP metrics, from :data:`_TALLIES` when scraped (prometheus_client's
    ``Counter``/``Histogram`` children took a lock and walked their buckets per request,
    ~5 us of a one-record produce's ~150 us):

    - ``logbus_http_requests_total`` {method, route, status}: requests answered;
    - ``logbus_http_request_duration_seconds`` {method, route}: a histogram of the time
      from request start to the end of the response body;
    - ``logbus_http_request_bytes_total`` / ``logbus_http_response_bytes_total`` {route}:
      body bytes received and sent (zero-copy file bytes included).
    """

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily(
            "logbus_http_requests",
            "HTTP requests answered, by method, route template and status.",
            labels=["method", "route", "status"],
        )
        latency: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
        bytes_in: dict[str, int] = {}
        bytes_out: dict[str, int] = {}
        for (method, route, status), tally in list(_TALLIES.items()):
            requests.add_metric([method, route, str(status)], tally.count)
            buckets, total = latency.setdefault((method, route), ([0] * len(tally.buckets), [0.0]))
            for i, n in enumerate(tally.buckets):
                buckets[i] += n
            total[0] += tally.seconds
            bytes_in[route] = bytes_in.get(route, 0) + tally.bytes_in
            bytes_out[route] = bytes_out.get(route, 0) + tally.bytes_out
        yield requests
        histogram = HistogramMetricFamily(
            "logbus_http_request_duration_seconds",
            "Time from request start to the end of the response body, by method and route "
            "template.",
            labels=["method", "route"],
        )
        bounds = [*(str(float(b)) for b in LATENCY_BUCKETS), "+Inf"]  # as Histogram renders them
        for (method, route), (buckets, total) in latency.items():
            cumulative = list(accumulate(buckets))
            histogram.add_metric(
                [method, route], list(zip(bounds, cumulative, strict=True)), total[0]
            )
        yield histogram
        for name, doc, values in (
            (
                "logbus_http_request_bytes",
                "Request body bytes received, by route template.",
                bytes_in,
            ),
            (
                "logbus_http_response_bytes",
                "Response body bytes sent (zero-copy file bytes included), by route template.",
                bytes_out,
            ),
        ):
            family = CounterMetricFamily(name, doc, labels=["route"])
            for route, value in values.items():
                family.add_metric([route], value)
            yield family


REGISTRY.register(HttpCollector())

# Group commit (app/api/group_commit.py): appends per request is appends / requests.
GROUP_COMMIT_REQUESTS = Counter(
    "logbus_group_commit_requests",
    "Produce requests (HTTP and WebSocket) that went through group commit; a request to "
    "several partitions counts once per partition.",
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
    edge middleware (app/api/edge.py) outside every check, so refused requests count too.
    On the event loop only (:class:`_Tally`)."""
    key = (scope["method"], route_template(scope), status)
    tally = _TALLIES.get(key)
    if tally is None:
        tally = _TALLIES[key] = _Tally()
    tally.count += 1
    tally.seconds += seconds
    tally.buckets[bisect_left(LATENCY_BUCKETS, seconds)] += 1
    tally.bytes_in += received
    tally.bytes_out += sent


class PartitionCollector(Collector):
    """Offsets of every partition this broker holds, read when scraped."""

    def __init__(self, state: MetricsState) -> None:
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


def render_metrics(state: MetricsState) -> tuple[bytes, str]:
    return generate_latest(REGISTRY) + generate_latest(state.registry), CONTENT_TYPE_LATEST
