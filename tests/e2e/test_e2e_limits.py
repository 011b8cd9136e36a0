"""The listener's limits against a real ``logbus serve``: each breach gets its answer, the
connection is closed, and the broker goes on serving everyone else.

Client addresses other than 127.0.0.1 are other loopback addresses (127.0.0.2, ...),
which Linux lets a socket bind to, so per-address and total limits can be told apart.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import Broker, BrokerFactory, ClusterFactory

LIMITS = {
    "LOGBUS_MAX_CONNECTIONS": "10",
    "LOGBUS_MAX_CONNECTIONS_PER_IP": "6",
    "LOGBUS_CONNECTIONS_MAX_IDLE_MS": "3000",
    "LOGBUS_REQUEST_HEADER_TIMEOUT_MS": "600",
    "LOGBUS_REQUEST_BODY_TIMEOUT_MS": "600",
    "LOGBUS_MAX_HEADER_BYTES": "4096",
    "LOGBUS_MAX_HEADER_COUNT": "20",
    "LOGBUS_MAX_REQUEST_BYTES": "65536",
}


@pytest.fixture
def limited(new_broker: BrokerFactory) -> Broker:
    broker = new_broker(env=LIMITS).start()
    with broker.client() as client:
        assert client.post("/topics", json={"name": "kept", "partitions": 1}).status_code == 201
        produced = client.post(
            "/topics/kept/partitions/0/records",
            json={"value_format": "string", "records": [{"value": "before"}]},
        )
        assert produced.status_code == 200
    return broker


def connect(broker: Broker, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(
        ("127.0.0.1", broker.port), timeout=10, source_address=(source, 0)
    )
    return sock


def read_answer(sock: socket.socket, timeout: float = 10) -> tuple[int, Any]:
    """(status, JSON body) of the one answer before the server closes the connection."""
    sock.settimeout(timeout)
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def still_serves(broker: Broker) -> None:
    with broker.client() as client:
        fetched = client.get("/topics/kept/partitions/0/records?offset=0&value_format=string")
        assert fetched.status_code == 200
        assert [r["value"] for r in fetched.json()["records"]][:1] == ["before"]


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def test_trickled_head_times_out_with_408(limited: Broker) -> None:
    with connect(limited) as sock:
        sock.sendall(b"GET /topics HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        status, body = read_answer(sock)
        assert status == 408 and body["error_code"] == "REQUEST_TIMED_OUT"
        assert time.monotonic() - started < 5
    still_serves(limited)


def test_trickled_body_times_out_with_408(limited: Broker) -> None:
    with connect(limited) as sock:
        sock.sendall(
            b"POST /topics/kept/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
            b'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"rec'
        )
        status, body = read_answer(sock)
        assert status == 408 and body["error_code"] == "REQUEST_TIMED_OUT"
    still_serves(limited)


def test_a_connection_that_never_asks_is_closed_when_idle(limited: Broker) -> None:
    with connect(limited) as sock:
        assert closed_within(sock, 8)


def test_huge_header_line_is_refused_with_431_before_it_is_read(limited: Broker) -> None:
    with connect(limited) as sock:
        sock.sendall(b"GET /topics HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            for _ in range(64):  # up to 4 MB; the broker stops reading long before
                sock.sendall(b"a" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            status, body = read_answer(sock)
        except ConnectionResetError:
            # The answer was lost in the reset of a socket we kept writing to: what counts
            # then is that the broker closed it and goes on serving (checked below).
            status, body = 431, {"error_code": "INVALID_REQUEST"}
        assert status == 431 and body["error_code"] == "INVALID_REQUEST"
    assert "X-Big" not in limited.log()  # the header was never parsed, let alone logged
    still_serves(limited)


def test_too_many_header_fields_answer_431(limited: Broker) -> None:
    headers = "".join(f"X-H{i}: {i}\r\n" for i in range(40))
    with connect(limited) as sock:
        sock.sendall(f"GET /topics HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        status, body = read_answer(sock)
        assert status == 431 and "header fields" in str(body["message"])
    still_serves(limited)


def test_declared_body_over_the_limit_answers_413_without_reading_it(limited: Broker) -> None:
    with connect(limited) as sock:
        sock.sendall(
            b"POST /topics/kept/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
            b"content-type: application/json\r\ncontent-length: 10000000\r\n\r\n"
        )
        status, body = read_answer(sock)
        assert status == 413 and body["error_code"] == "MESSAGE_TOO_LARGE"
    still_serves(limited)


def test_connections_per_address_and_in_total(
    limited: Broker, sockets: list[socket.socket]
) -> None:
    for _ in range(6):
        sockets.append(connect(limited, "127.0.0.1"))
    refused = connect(limited, "127.0.0.1")
    status, body = read_answer(refused)
    refused.close()
    assert status == 429 and body["error_code"] == "THROTTLING_QUOTA_EXCEEDED"
    assert body["retriable"] is True
    for _ in range(4):  # another address still gets in, up to the total of 10
        sockets.append(connect(limited, "127.0.0.2"))
    time.sleep(0.2)
    over = connect(limited, "127.0.0.3")
    status, body = read_answer(over)
    over.close()
    assert status == 503 and body["error_code"] == "BROKER_NOT_AVAILABLE"
    # Each held connection still works, and once they are gone new ones are let in.
    sockets[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert sockets[0].recv(100).startswith(b"HTTP/1.1 200")
    for sock in sockets:
        sock.close()
    sockets.clear()
    deadline = time.monotonic() + 10
    while True:
        try:
            still_serves(limited)
            break
        except (AssertionError, httpx.HTTPError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_half_closed_client_gets_its_answer(limited: Broker) -> None:
    with connect(limited) as sock:
        sock.sendall(b"GET /topics HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        status, body = read_answer(sock)
        assert status == 200 and "kept" in str(body)
    still_serves(limited)


def test_websocket_connections_count_until_they_close(limited: Broker) -> None:
    from websockets.sync.client import connect as ws_connect

    url = f"ws://127.0.0.1:{limited.port}/ws/produce"
    with contextlib.ExitStack() as held:
        for _ in range(6):
            held.enter_context(ws_connect(url, open_timeout=10))
        refused = connect(limited)
        status, body = read_answer(refused)
        refused.close()
        assert status == 429 and body["error_code"] == "THROTTLING_QUOTA_EXCEEDED"
    deadline = time.monotonic() + 10
    while True:  # the closes reach the broker: the address is let in again
        probe = connect(limited)
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = probe.recv(100)
        probe.close()
        if answer.startswith(b"HTTP/1.1 200"):
            break
        assert time.monotonic() < deadline, answer
        time.sleep(0.1)


@pytest.mark.parametrize("accept", ["application/octet-stream", "application/json"])
def test_a_reader_that_never_reads_is_cut_after_the_send_timeout(
    new_broker: BrokerFactory, accept: str
) -> None:
    broker = new_broker(env={"LOGBUS_SEND_TIMEOUT_MS": "1000"}).start()
    with broker.client() as client:
        assert client.post("/topics", json={"name": "big", "partitions": 1}).status_code == 201
        body = {"value_format": "string", "records": [{"value": "x" * 1000}] * 1000}
        for _ in range(16):  # 16 MB
            assert client.post("/topics/big/partitions/0/records", json=body).status_code == 200
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", broker.port))
    with sock:
        sock.sendall(
            b"GET /topics/big/partitions/0/records?offset=0&max_bytes=67108864 HTTP/1.1\r\n"
            b"Host: x\r\nAccept: " + accept.encode() + b"\r\n\r\n"
        )
        time.sleep(5)  # never reading: the broker's send stalls, then its timeout fires
        received, head = 0, b""
        sock.settimeout(10)
        try:
            while chunk := sock.recv(1 << 20):
                if not head:
                    head = chunk[:200]
                received += len(chunk)
        except (ConnectionResetError, TimeoutError):
            pass
    assert head.startswith(b"HTTP/1.1 200")
    declared = int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
    assert received < declared  # cut short: the broker gave up on this reader
    assert "took no bytes" in broker.log()
    still = httpx.get(f"{broker.url}/topics/big/partitions/0/records?offset=0&max_bytes=1000")
    assert still.status_code == 200


@pytest.mark.slow
def test_a_cluster_broker_that_cannot_host_a_topic_refuses_it_and_serves_the_rest(
    cluster_factory: ClusterFactory,
) -> None:
    """Cluster mode answers the partition budget as a lone broker does: the creating broker
    refuses (400, nothing written) a topic whose replicas it cannot host; a broker that is
    handed more replicas than it can hold (created through another broker) refuses that
    topic with a log line and goes on with the others, also when it restarts."""
    cluster = cluster_factory(2, start=False)
    small = cluster.brokers[2]
    small.env = {**small.env, "LOGBUS_MAX_PARTITIONS": "4"}
    cluster.start()

    refused = httpx.post(
        f"{cluster.url(2)}/topics", json={"name": "wide", "partitions": 10, "replication_factor": 1}
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error_code"] == "INVALID_PARTITIONS"
    assert httpx.get(f"{cluster.url(1)}/topics/wide").status_code == 404

    # Through broker 1, which can host its share: broker 2 cannot, and says so.
    httpx.post(
        f"{cluster.url(1)}/topics",
        # timeout_ms 0: broker 2's share never gets a leader, so waiting for leaders
        # would only wait out the create's 30 s; the refusal is what is checked.
        json={"name": "a-wide", "partitions": 10, "replication_factor": 1, "timeout_ms": 0},
        timeout=60,
    )
    cluster.wait_until(
        lambda: "cannot host its replicas" in small.log() or None, message="broker 2 refuses"
    )
    created = httpx.post(
        f"{cluster.url(1)}/topics",
        json={"name": "b-after", "partitions": 2, "replication_factor": 2},
        timeout=60,
    )
    assert created.status_code == 201, created.text
    # A restart syncs both topics at once: the refused one must not stop the other
    # (before, the broker never became ready).
    small.stop()
    small.start()
    for p in range(2):

        def produced(p: int = p) -> bool | None:
            # The restarted broker may take leadership back meanwhile (its partitions'
            # leaders move): a retriable answer (307/421 naming the new leader, 503) is
            # "not yet", anything else fails.
            answer = httpx.post(
                f"{cluster.url(cluster.leader('b-after', p))}/topics/b-after/partitions/{p}/records",
                params={"acks": "all"},
                json={"records": [{"value": "kept"}]},
                timeout=30,
            )
            if answer.status_code != 200:
                assert answer.json().get("retriable"), answer.text
                return None
            return True

        cluster.wait_until(produced, message=f"b-after-{p} takes a record")
