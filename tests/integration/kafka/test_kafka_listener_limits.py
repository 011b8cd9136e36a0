"""The Kafka listener under bad input and its limits: the offending connection closes (with
a log line), the broker keeps serving everyone else."""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from kafka_harness import KafkaBroker, start_broker, stop_broker


def connect(broker: KafkaBroker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.kafka_port), timeout=10)
    return sock


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request with header v1 (the header of every non-flexible version)."""
    client_id = b"raw"
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    payload += body
    return struct.pack(">i", len(payload)) + payload


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            assert chunk, "connection closed"
            out += chunk
        return out

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def closed(sock: socket.socket) -> bool:
    """True once the broker closed the connection (EOF or reset), waiting up to the timeout."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def still_serving(broker: KafkaBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert admin.list_topics(timeout=10).brokers


def test_api_versions_of_a_version_too_new_is_answered_in_v0_with_the_ranges(
    kafka_broker: KafkaBroker,
) -> None:
    with connect(kafka_broker) as sock:
        sock.sendall(request(18, 99, 77))
        frame = read_frame(sock)
        correlation_id, error, count = struct.unpack_from(">ihi", frame)
        assert (correlation_id, error) == (77, 35)  # UNSUPPORTED_VERSION
        ranges = {
            struct.unpack_from(">hhh", frame, 10 + 6 * i)[0]: struct.unpack_from(
                ">hhh", frame, 10 + 6 * i
            )[1:]
            for i in range(count)
        }
        assert ranges[0] == (3, 10)  # Produce: librdkafka compresses from v3
        assert ranges[18] == (0, 3)
        # The connection stays usable: the client retries with a version it can use.
        sock.sendall(request(18, 0, 78))
        correlation_id, error = struct.unpack_from(">ih", read_frame(sock))
        assert (correlation_id, error) == (78, 0)


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">i", 200 * 1024 * 1024),  # over socket.request.max.bytes (100 MiB)
        struct.pack(">i", -5),
        struct.pack(">i", 0),
        struct.pack(">i", 10) + os.urandom(10),  # garbage with a plausible size
        request(3, 12, 1, b"\xff\xff\xff"),  # a Metadata v12 body that does not parse
        request(11, 0, 1),  # JoinGroup: not served yet
    ],
    ids=["oversized", "negative", "empty", "garbage", "bad-body", "unserved-api"],
)
def test_bad_frames_close_their_connection_and_the_broker_keeps_serving(
    kafka_broker: KafkaBroker, data: bytes
) -> None:
    with connect(kafka_broker) as sock:
        sock.sendall(data)
        assert closed(sock)
    still_serving(kafka_broker)
    assert "kafka connection from 127.0.0.1:" in kafka_broker.log()


@pytest.fixture
def limited_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = start_broker(
        tmp_path,
        ("LOGBUS_KAFKA_MAX_CONNECTIONS_PER_IP", "2"),
        ("LOGBUS_KAFKA_SOCKET_REQUEST_MAX_BYTES", "4096"),
        ("LOGBUS_KAFKA_CONNECTIONS_MAX_IDLE_MS", "1000"),
    )
    yield broker
    stop_broker(broker)


@pytest.mark.slow
def test_limits_connections_per_address_request_size_and_idle(limited_broker: KafkaBroker) -> None:
    first, second = connect(limited_broker), connect(limited_broker)
    with first, second, connect(limited_broker) as third:
        assert closed(third)  # the third from one address
        second.sendall(request(18, 0, 1))
        assert struct.unpack_from(">ih", read_frame(second)) == (1, 0)
        # A frame over the configured 4 KiB closes its connection.
        second.sendall(struct.pack(">i", 4097))
        assert closed(second)
        # A connection with no request for connections.max.idle.ms is closed.
        first.settimeout(20)
        assert closed(first)
    assert "kafka_max_connections_per_ip" in limited_broker.log()


@pytest.fixture
def small_budget_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = start_broker(tmp_path, ("LOGBUS_MEMORY_BUDGET_BYTES", str(1024 * 1024)))
    yield broker
    stop_broker(broker)


@pytest.mark.slow
def test_frames_are_held_from_the_brokers_memory_budget(small_budget_broker: KafkaBroker) -> None:
    """A frame's declared size is reserved when its prefix arrives: while one connection
    holds most of a 1 MiB budget, another's 700 KB request waits, and is answered once the
    first lets go (the memory budget HTTP bodies share, Kafka's queued.max.request.bytes)."""
    big = 700 * 1024
    with connect(small_budget_broker) as holder:
        holder.sendall(struct.pack(">i", big) + b"\0" * 100)  # declared, never finished
        with connect(small_budget_broker) as waiting:
            # A valid ApiVersions v0 request padded to 700 KB (bytes after a body are ignored).
            frame = request(18, 0, 5)
            waiting.sendall(struct.pack(">i", big) + frame[4:] + b"\0" * (big - len(frame) + 4))
            waiting.settimeout(1)
            with pytest.raises(TimeoutError):
                waiting.recv(1)  # held: the budget cannot grant it while `holder` holds its share
            holder.close()
            waiting.settimeout(30)
            assert struct.unpack_from(">ih", read_frame(waiting)) == (5, 0)
