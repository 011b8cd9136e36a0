"""The HTTP metrics' tallies, as Prometheus reads them (app/api/metrics.py)."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.api.metrics import UNMATCHED, count_request


def _samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counts_latency_buckets_and_bytes_by_route() -> None:
    route = "/unit-metrics/{x}"
    scope = {"method": "POST", "route": SimpleNamespace(path=route)}
    count_request(scope, 200, 0.0004, 10, 100)  # le 0.0005
    count_request(scope, 200, 0.0005, 0, 7)  # on the bound: le 0.0005
    count_request(scope, 404, 0.02, 5, 0)  # le 0.025, another status
    count_request(scope, 200, 99.0, 0, 0)  # past the last bound: +Inf only
    count_request({"method": "GET"}, 400, 0.001, 0, 3)  # no route matched
    samples = _samples()
    method_route = (("method", "POST"), ("route", route))
    assert samples[("logbus_http_requests_total", (*method_route, ("status", "200")))] == 3
    assert samples[("logbus_http_requests_total", (*method_route, ("status", "404")))] == 1
    hist = "logbus_http_request_duration_seconds"
    bucket = lambda le: samples[(f"{hist}_bucket", (("le", le), *method_route))]  # noqa: E731
    assert bucket("0.0005") == 2
    assert bucket("0.01") == 2
    assert bucket("0.025") == 3
    assert bucket("30.0") == 3
    assert bucket("+Inf") == 4
    assert samples[(f"{hist}_count", method_route)] == 4
    assert abs(samples[(f"{hist}_sum", method_route)] - (0.0004 + 0.0005 + 0.02 + 99.0)) < 1e-9
    assert samples[("logbus_http_request_bytes_total", (("route", route),))] == 15
    assert samples[("logbus_http_response_bytes_total", (("route", route),))] == 107
    unmatched = (("method", "GET"), ("route", UNMATCHED), ("status", "400"))
    assert samples[("logbus_http_requests_total", unmatched)] >= 1


def test_counts_grow_between_scrapes() -> None:
    scope = {"method": "GET", "route": SimpleNamespace(path="/unit-metrics/grow")}
    key = (
        "logbus_http_requests_total",
        (("method", "GET"), ("route", "/unit-metrics/grow"), ("status", "200")),
    )
    count_request(scope, 200, 0.001, 0, 0)
    first = _samples()[key]
    count_request(scope, 200, 0.001, 0, 0)
    assert _samples()[key] == first + 1
