"""Liveness, readiness, Prometheus metrics, and the app's two ways of getting a LogManager."""

from __future__ import annotations

from pathlib import Path

from api_helpers import create_topic, make_settings, produce
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from app.api import create_app
from app.common.batch import build_batch
from app.core.log.manager import LogManager


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_health_and_readiness(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    # Before the lifespan runs the process is alive but not ready.
    outside = TestClient(app)
    assert outside.get("/healthz").json() == {"status": "ok"}
    r = outside.get("/readyz")
    assert r.status_code == 503
    assert r.json()["error_code"] == "BROKER_NOT_AVAILABLE"
    assert r.json()["retriable"] is True
    assert outside.get("/topics").status_code == 503
    with TestClient(app) as client:
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.get("/healthz").status_code == 200
    # After shutdown the manager is closed and the app says so.
    assert outside.get("/readyz").status_code == 503
    assert (tmp_path / "data" / ".clean_shutdown").exists()


def test_metrics(client: TestClient) -> None:
    create_topic(client, "met", partitions=2)
    produce(client, "met", [{"value": i, "partition": 1} for i in range(3)])
    client.get("/topics/met/partitions/1/records", params={"offset": 0})
    client.get("/topics/met/partitions/9/records", params={"offset": 0})
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    samples = _samples(r.text)
    part = (("partition", "1"), ("topic", "met"))
    assert samples[("logbus_log_end_offset", part)] == 3
    assert samples[("logbus_high_watermark", part)] == 3
    assert samples[("logbus_log_start_offset", part)] == 0
    assert samples[("logbus_log_end_offset", (("partition", "0"), ("topic", "met")))] == 0
    produced = (
        ("method", "POST"),
        ("route", "/topics/{topic}/records"),
        ("status", "200"),
    )
    assert samples[("logbus_http_requests_total", produced)] >= 1
    missing = (
        ("method", "GET"),
        ("route", "/topics/{topic}/partitions/{partition}/records"),
        ("status", "404"),
    )
    assert samples[("logbus_http_requests_total", missing)] >= 1
    assert samples[("logbus_http_request_bytes_total", (("route", "/topics/{topic}/records"),))] > 0
    fetch_route = (("route", "/topics/{topic}/partitions/{partition}/records"),)
    assert samples[("logbus_http_response_bytes_total", fetch_route)] > 0
    latency = (("method", "POST"), ("route", "/topics/{topic}/records"))
    assert samples[("logbus_http_request_duration_seconds_count", latency)] >= 1


def test_many_apps_do_not_collide_in_the_registry(tmp_path: Path) -> None:
    for i in range(3):
        with TestClient(create_app(make_settings(tmp_path / str(i)))) as client:
            create_topic(client, f"t{i}")
            text = client.get("/metrics").text
            # Each app reports its own partitions only.
            names = {labels for (name, labels) in _samples(text) if name == "logbus_log_end_offset"}
            assert names == {(("partition", "0"), ("topic", f"t{i}"))}


def test_external_manager_is_served_and_left_running(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "ext")
    manager.start()
    try:
        app = create_app(make_settings(tmp_path), manager)
        with TestClient(app) as client:
            assert client.get("/readyz").status_code == 200
            produce(client, "ext", [{"value": 1}])
        # The app did not stop a manager it does not own.
        assert manager.get_log("ext", 0).log_end_offset == 1
        manager.get_log("ext", 0).append(build_batch([(None, b"x")]))
        assert not (tmp_path / "ext" / ".clean_shutdown").exists()
    finally:
        manager.shutdown()
