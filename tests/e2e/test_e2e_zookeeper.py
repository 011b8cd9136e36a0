"""The cluster-mode test harness itself: a real ZooKeeper (tests/e2e/zookeeper.py) and the
broker-process plumbing of tests/e2e/cluster.py, without relying on replication."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import zookeeper as zk_harness
from cluster import Cluster, wait_until
from conftest import ClusterFactory
from kazoo.client import KazooClient  # type: ignore[import-untyped,unused-ignore]
from kazoo.exceptions import NoNodeError  # type: ignore[import-untyped,unused-ignore]
from zookeeper import ZooKeeperServer

# Holds a ZooKeeper session with an ephemeral node until killed.
HOLDER = """
import sys, time
from kazoo.client import KazooClient
client = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
client.start(timeout=10)
client.create(sys.argv[2], b"held", ephemeral=True, makepath=True)
print("ready", client._session_timeout, flush=True)
while True:
    time.sleep(60)
"""


def _client(server: ZooKeeperServer, timeout: float = 10.0) -> KazooClient:
    client = KazooClient(hosts=server.connect_string, timeout=timeout)
    client.start(timeout=10)
    return client


def _close(client: KazooClient) -> None:
    client.stop()
    client.close()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_zookeeper_answers_and_kazoo_connects(zookeeper: ZooKeeperServer) -> None:
    host, port = zookeeper.connect_string.split(":")
    assert host == "127.0.0.1" and int(port) == zookeeper.port
    assert zookeeper.four_letter_word("ruok") == "imok"
    assert "Zookeeper version: 3." in zookeeper.four_letter_word("srvr")
    client = _client(zookeeper)
    try:
        client.create("/logbus/probe", b"hello", makepath=True)
        assert client.get("/logbus/probe")[0] == b"hello"
    finally:
        _close(client)
    # tickTime=500: sessions as short as 1 s are granted, not raised to ZooKeeper's 4 s default.
    short = KazooClient(hosts=zookeeper.connect_string, timeout=1.0)
    short.start(timeout=10)
    try:
        assert short._session_timeout == 1000
    finally:
        _close(short)


def test_data_survives_stop_kill_and_restart_on_the_same_dir(zookeeper: ZooKeeperServer) -> None:
    port = zookeeper.port
    client = _client(zookeeper)
    client.create("/kept", b"v1", makepath=True)
    _close(client)

    zookeeper.stop()
    assert not zookeeper.running and not zookeeper.is_ok()
    zookeeper.start()
    assert zookeeper.port == port, "a restarted server keeps its port (connect strings stay valid)"
    client = _client(zookeeper)
    assert client.get("/kept")[0] == b"v1"
    client.set("/kept", b"v2")  # acknowledged = in the transaction log
    _close(client)

    zookeeper.kill()
    zookeeper.restart()
    client = _client(zookeeper)
    try:
        assert client.get("/kept")[0] == b"v2"
    finally:
        _close(client)


def test_pause_stops_answers_and_resume_brings_them_back(zookeeper: ZooKeeperServer) -> None:
    client = _client(zookeeper, timeout=10.0)
    try:
        client.create("/paused", b"x")
        zookeeper.pause()
        assert zookeeper.running and zookeeper.paused
        assert not zookeeper.is_ok(timeout=0.5)
        with pytest.raises(Exception):  # noqa: B017 - kazoo's timeout type varies by handler
            client.get_async("/paused").get(timeout=0.5)
        zookeeper.resume()
        assert zookeeper.is_ok()
        # The session (10 s) outlived the pause: the same client carries on.
        assert wait_until(lambda: client.get("/paused")[0], 10, "kazoo after resume") == b"x"
    finally:
        _close(client)


def test_ephemeral_node_vanishes_when_its_holder_is_killed(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, zookeeper.connect_string, "/brokers/ids/7", "2.0"],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "holder.err").open("wb"),
    )
    client = _client(zookeeper)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().decode()
        assert line.startswith("ready"), (tmp_path / "holder.err").read_text()
        assert line.split()[1] == "2000", "the 2 s session was granted as asked"
        assert client.get("/brokers/ids/7")[0] == b"held"
        holder.kill()
        holder.wait()
        killed = time.monotonic()
        # No clean close happened: the node lives on until the session times out.
        assert client.exists("/brokers/ids/7") is not None
        wait_until(lambda: client.exists("/brokers/ids/7") is None, 15, "session expiry")
        assert time.monotonic() - killed < 10
        with pytest.raises(NoNodeError):
            client.get("/brokers/ids/7")
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        _close(client)


def test_server_is_gone_after_close(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk").start()
    proc, port = server.proc, server.port
    assert proc is not None and _listening(port)
    server.pause()
    server.close()  # resumes, SIGTERMs, waits
    server.close()  # idempotent
    assert proc.poll() is not None and server.proc is None
    assert not _listening(port)
    assert f"--- start on port {port}" in server.log() and "binding to port" in server.log()


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_zookeeper_fails_under_ci_and_skips_otherwise(
    ci: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(zk_harness, "DEBIAN_JAVA_DIR", tmp_path)
    monkeypatch.delenv("ZOOKEEPER_HOME", raising=False)
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="make zookeeper"):
        ZooKeeperServer(tmp_path / "zk").start()


def test_cluster_brokers_keep_their_urls_across_kill_pause_and_restart(
    cluster_factory: ClusterFactory,
) -> None:
    # Only the process plumbing: no /metadata wait, so this runs without replication.
    cluster: Cluster = cluster_factory(3, start=False)
    cluster.start(wait_for_metadata=False)
    urls = cluster.urls
    assert len(set(urls)) == 3 and cluster.live_ids == [1, 2, 3]
    assert cluster.zookeeper_connect == f"{cluster.zookeeper.connect_string}/logbus"

    cluster.kill(2)
    assert cluster.live_ids == [1, 3]
    cluster.restart(2, wait=False)
    assert cluster.urls == urls
    assert httpx.get(f"{cluster.url(2)}/readyz", timeout=5).status_code == 200

    cluster.pause(3)
    assert cluster.live_ids == [1, 2]
    with pytest.raises(httpx.TimeoutException):
        httpx.get(f"{cluster.url(3)}/readyz", timeout=0.5)
    cluster.resume(3)
    assert httpx.get(f"{cluster.url(3)}/readyz", timeout=5).status_code == 200

    with pytest.raises(AssertionError, match="waiting for never"):
        cluster.wait_until(lambda: False, timeout=0.2, message="never")
