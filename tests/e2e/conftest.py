"""End-to-end fixtures: a real ``logbus serve`` subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Protocol

# Cluster mode's harness; imported as module objects because they import this module too.
import cluster as cluster_harness
import httpx
import pytest
import zookeeper as zookeeper_harness
from procs import freeze

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 30.0


free_port = zookeeper_harness.free_port


class Broker:
    """One broker process over one data dir; can be stopped, killed and started again.

    ``args``: extra ``logbus serve`` arguments, or a function of the port giving them (for
    flags that name the port, like ``--advertised-url``). ``port``: a fixed port; with
    ``keep_port`` the port picked on the first start is kept on later ones (a cluster
    member's advertised URL must not change across restarts). Otherwise each start picks a
    fresh free port.
    """

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        env: dict[str, str] | None = None,
        *,
        args: Sequence[str] | Callable[[int], Sequence[str]] = (),
        port: int = 0,
        keep_port: bool = False,
    ) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.env = env or {}
        self.args = args
        self.port = port
        self.fixed_port = bool(port)
        self.keep_port = keep_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        # A broker serving TLS: https, and the client context its probes trust.
        self.scheme = "http"
        self.verify: ssl.SSLContext | bool = True

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def clean_shutdown_marker(self) -> Path:
        return self.data_dir / ".clean_shutdown"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> Broker:
        assert self.proc is None, "broker already running"
        # A port chosen now could be taken before the broker binds it; retry then.
        for _ in range(3):
            self.launch()
            if self.wait_ready():
                return self
            self.proc = None
            if self.fixed_port:
                break
        raise AssertionError(f"broker did not become ready on port {self.port}:\n{self.log()}")

    def launch(self) -> None:
        """Start the process without waiting for it (see wait_ready)."""
        assert self.proc is None, "broker already running"
        if not self.fixed_port:
            self.port = free_port()
        extra = self.args(self.port) if callable(self.args) else self.args
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        env.pop("LOGBUS_CONFIG", None)
        with self.log_path.open("ab") as log:
            log.write(f"--- start on port {self.port}\n".encode())
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "app.cli",
                    "serve",
                    "--data-dir",
                    str(self.data_dir),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    *extra,
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.paused = False

    def wait_ready(self, timeout: float = START_TIMEOUT_SECONDS) -> bool:
        """Wait for /readyz: False (the process killed) when it exits or times out."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                ready = httpx.get(f"{self.url}/readyz", timeout=1, verify=self.verify)
                if ready.status_code == 200:
                    self.fixed_port = self.fixed_port or self.keep_port
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.proc.kill()
        self.proc.wait()
        return False

    def stop(self) -> int:
        """SIGTERM and wait: the exit status of a clean shutdown."""
        assert self.proc is not None, "broker not running"
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"broker ignored SIGTERM:\n{self.log()}") from None
        self.proc = None
        return code

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs at all."""
        assert self.proc is not None, "broker not running"
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, nothing answers (a hung broker)."""
        assert self.proc is not None, "broker not running"
        freeze(self.proc)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after pause()."""
        assert self.proc is not None, "broker not running"
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, **kwargs: object) -> httpx.Client:
        kwargs.setdefault("verify", self.verify)
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)  # type: ignore[arg-type]

    def metric(self, name: str) -> float:
        """A sample of /metrics (0 when absent, as for a counter never incremented)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10, verify=self.verify).text
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return 0.0


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[list[Broker]]:
    """Make brokers with ``Broker(...)``; those still running at the end are stopped
    with SIGTERM and must leave ``.clean_shutdown`` behind."""
    made: list[Broker] = []
    yield made
    for broker in made:
        if broker.proc is not None:
            code = broker.stop()
            assert code == 0, f"broker exited with {code} on SIGTERM:\n{broker.log()}"
            assert broker.clean_shutdown_marker.exists(), broker.log()


class BrokerFactory(Protocol):
    def __call__(self, env: dict[str, str] | None = None) -> Broker: ...


@pytest.fixture
def new_broker(tmp_path: Path, broker_factory: list[Broker]) -> BrokerFactory:
    """``new_broker(env=...)``: a stopped broker over a fresh data dir, cleaned up after the test."""
    counter = iter(range(1000))

    def make(env: dict[str, str] | None = None) -> Broker:
        n = next(counter)
        made = Broker(tmp_path / f"data{n}", tmp_path / f"broker{n}.log", env)
        broker_factory.append(made)
        return made

    return make


@pytest.fixture
def broker(new_broker: BrokerFactory) -> Broker:
    return new_broker().start()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The ``broker`` fixture's broker (default settings, a fresh data dir), started once
    per test module and shared by those of its tests that neither stop, kill nor restart
    it nor change a broker-wide setting, and whose topics and groups no other test of the
    module names (a pattern subscription included). A start (a Python process importing
    the app, then its lifespan) is seconds on a loaded host, the most of a short test. At
    the end it gets SIGTERM and must exit 0 and leave ``.clean_shutdown``, as after
    ``broker``."""
    workdir = tmp_path_factory.mktemp("shared-broker")
    made = Broker(workdir / "data", workdir / "broker.log")
    try:
        yield made.start()
    finally:
        code = made.stop() if made.proc is not None else 0
    assert code == 0, f"broker exited with {code} on SIGTERM:\n{made.log()}"
    assert made.clean_shutdown_marker.exists(), made.log()


# ---------------------------------------------------------------- cluster mode

ZOOKEEPER_KEY = pytest.StashKey[zookeeper_harness.ZooKeeperServer]()
CLUSTERS_KEY = pytest.StashKey[list[cluster_harness.Cluster]]()


@pytest.fixture
def zookeeper(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[zookeeper_harness.ZooKeeperServer]:
    """A started standalone ZooKeeper (Debian's package) of the test's own: function scope,
    since tests kill, pause and restart it and a start takes well under a second. Stopped
    after the test; the test is skipped without ZooKeeper or Java (failed under CI=true)."""
    server = zookeeper_harness.ZooKeeperServer(tmp_path / "zookeeper")
    request.node.stash[ZOOKEEPER_KEY] = server
    try:
        yield server.start()
    finally:
        server.close()


class ClusterFactory(Protocol):
    def __call__(
        self,
        size: int = 3,
        *,
        env: dict[str, str] | None = None,
        start: bool = True,
        chroot: str | None = None,
        create_chroot: bool = False,
        access: cluster_harness.Access | None = None,
        kafka: bool | Mapping[int, int] = False,
    ) -> cluster_harness.Cluster: ...


@pytest.fixture
def cluster_factory(
    request: pytest.FixtureRequest, tmp_path: Path, zookeeper: zookeeper_harness.ZooKeeperServer
) -> Iterator[ClusterFactory]:
    """``cluster_factory(size=3, env=..., start=True, access=...)``: a cluster over the test's ZooKeeper
    (chroot /logbus, then /logbus1...). Every broker still running at the end gets SIGTERM
    (all at once) and must exit 0; the brokers stop before ZooKeeper does."""
    made: list[cluster_harness.Cluster] = []
    request.node.stash[CLUSTERS_KEY] = made

    def make(
        size: int = 3,
        *,
        env: dict[str, str] | None = None,
        start: bool = True,
        chroot: str | None = None,
        create_chroot: bool = False,
        access: cluster_harness.Access | None = None,
        kafka: bool | Mapping[int, int] = False,
    ) -> cluster_harness.Cluster:
        n = len(made)
        made_cluster = cluster_harness.Cluster(
            tmp_path / (f"cluster{n}" if n else "cluster"),
            zookeeper,
            size,
            chroot=chroot if chroot is not None else (f"/logbus{n}" if n else "/logbus"),
            env=env,
            create_chroot=create_chroot,
            access=access,
            kafka=kafka,
        )
        made.append(made_cluster)
        return made_cluster.start() if start else made_cluster

    yield make
    unclean = []
    for made_cluster in made:
        codes = made_cluster.stop(stop_zookeeper=False)
        unclean += [(made_cluster.brokers[i].log_path.name, c) for i, c in codes.items() if c]
    assert not unclean, f"brokers exited non-zero on SIGTERM: {unclean}"


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> cluster_harness.Cluster:
    """Three started brokers (ids 1..3) over a fresh ZooKeeper, with short timings
    (cluster.DEFAULT_ENV); /metadata already lists all three and a controller."""
    return cluster_factory()


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster_harness.Cluster]:
    """The ``cluster`` fixture's three brokers and ZooKeeper, started once per test module
    and shared by those of its tests that leave it as they found it: they kill, pause,
    stop or restart no broker and not ZooKeeper, change no cluster-wide setting (ACLs,
    quotas, users), and name their topics and groups so that no other test of the module
    uses them. A cluster start (ZooKeeper's JVM, three brokers, the controller and the
    group coordinators' partitions) takes most of such a test's time. At the end every
    broker gets SIGTERM and must exit 0, as after ``cluster``."""
    workdir = tmp_path_factory.mktemp("shared-cluster")
    server = zookeeper_harness.ZooKeeperServer(workdir / "zookeeper")
    made = cluster_harness.Cluster(workdir / "cluster", server)
    try:
        yield made.start()
    finally:
        codes = made.stop()
    unclean = [(made.brokers[i].log_path.name, c) for i, c in codes.items() if c]
    assert not unclean, f"brokers exited non-zero on SIGTERM: {unclean}"


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """Show the broker logs of a failed test: the cause is often only there."""
    if call.when != "call" or call.excinfo is None:
        return
    factory = getattr(item, "funcargs", {}).get("broker_factory")
    for broker in factory or []:
        item.add_report_section("call", f"broker log {broker.log_path.name}", broker.log())
    for made_cluster in item.stash.get(CLUSTERS_KEY, []):
        for name, text in made_cluster.logs().items():
            if name != made_cluster.zookeeper.log_path.name:
                item.add_report_section("call", f"{made_cluster.workdir.name} log {name}", text)
    shared_broker = getattr(item, "funcargs", {}).get("shared_broker")
    if shared_broker is not None:
        tail = "\n".join(shared_broker.log().splitlines()[-300:])
        item.add_report_section("call", "shared broker log (last 300 lines)", tail)
    shared = getattr(item, "funcargs", {}).get("shared_cluster")
    if shared is not None:
        # Its logs hold the module's earlier tests too: their tails.
        for name, text in shared.logs().items():
            tail = "\n".join(text.splitlines()[-300:])
            item.add_report_section("call", f"shared cluster log {name} (last 300 lines)", tail)
    server = item.stash.get(ZOOKEEPER_KEY, None)
    if server is not None:
        tail = "\n".join(server.log().splitlines()[-300:])
        item.add_report_section("call", "zookeeper log (last 300 lines)", tail)
