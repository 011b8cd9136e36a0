"""Per-app WebSocket counters, exported on ``/metrics`` through the app's registry.

``buffered_bytes`` is the record-batch bytes subscriptions have read from the
log and not yet handed to the transport: the memory flow control bounds. Its
peak is kept so a test (or an operator) can check the bound held under load.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass
class WsStats:
    connections: dict[str, int] = field(default_factory=lambda: {"subscribe": 0, "produce": 0})
    buffered_bytes: int = 0
    buffered_bytes_peak: int = 0
    # The most one socket held at once: the bound flow control promises per socket.
    socket_buffered_bytes_peak: int = 0
    frames_sent: int = 0
    records_sent: int = 0

    def hold(self, n: int) -> None:
        """``n`` bytes read for one socket (a socket holds one read at a time)."""
        if n > self.socket_buffered_bytes_peak:
            self.socket_buffered_bytes_peak = n
        self.buffered_bytes += n
        if self.buffered_bytes > self.buffered_bytes_peak:
            self.buffered_bytes_peak = self.buffered_bytes

    def release(self, n: int) -> None:
        self.buffered_bytes -= n


class WsCollector(Collector):
    def __init__(self, stats: WsStats) -> None:
        self.stats = stats

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.stats
        conns = GaugeMetricFamily(
            "logbus_ws_connections", "Open WebSocket connections.", labels=["endpoint"]
        )
        for endpoint, n in sorted(s.connections.items()):
            conns.add_metric([endpoint], n)
        yield conns
        yield GaugeMetricFamily(
            "logbus_ws_buffered_bytes",
            "Record bytes read for subscribers and not yet handed to the transport.",
            value=s.buffered_bytes,
        )
        yield GaugeMetricFamily(
            "logbus_ws_buffered_bytes_peak",
            "Highest logbus_ws_buffered_bytes since the broker started.",
            value=s.buffered_bytes_peak,
        )
        yield GaugeMetricFamily(
            "logbus_ws_socket_buffered_bytes_peak",
            "Most record bytes one subscriber socket has held at once since the broker started.",
            value=s.socket_buffered_bytes_peak,
        )
        yield CounterMetricFamily(
            "logbus_ws_frames_sent", "Record frames sent to subscribers.", value=s.frames_sent
        )
        yield CounterMetricFamily(
            "logbus_ws_records_sent", "Records sent to subscribers.", value=s.records_sent
        )
