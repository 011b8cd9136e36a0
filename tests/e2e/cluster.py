"""A cluster-mode harness: one real ZooKeeper and N ``logbus serve --zookeeper`` brokers.

Brokers get ids 1..N and keep their port (so their advertised URL) across kills and
restarts. Methods take a broker *id*, not a list index: ``cluster.kill(2)`` kills broker 2.
Timings are shortened through ``LOGBUS_*`` env vars (DEFAULT_ENV) so failure detection takes
seconds; pass ``env=`` to override or add settings.

In a test, use the ``cluster`` fixture (3 brokers, started and cleaned up by
``tests/e2e/conftest.py``) or ``cluster_factory(size=..., env=...)``; a cluster serving
TLS or asking for credentials takes ``access=Access(scheme, verify, auth)``.
"""

from __future__ import annotations

import signal
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

# The e2e conftest as a module object, not ``from conftest import``: conftest imports this
# module too, and other suites' conftest.py files replace sys.modules["conftest"] later.
import conftest
import httpx
from kazoo.client import KazooClient  # type: ignore[import-untyped,unused-ignore]
from zookeeper import ZooKeeperServer

T = TypeVar("T")


@dataclass(frozen=True)
class Access:
    """How the harness (and a test, through ``cluster.access``) reaches the brokers: their
    scheme (they advertise ``scheme://127.0.0.1:port``), the TLS trust of its clients and
    the credentials of its own requests (``/metadata``...). The default: plaintext,
    anonymous."""

    scheme: str = "http"
    verify: ssl.SSLContext | bool = True
    auth: tuple[str, str] | None = None

    def http(self) -> dict[str, Any]:
        """httpx keyword arguments: ``httpx.get(url, **cluster.access.http())``."""
        return {"verify": self.verify, "auth": self.auth}


DEFAULT_ENV = {
    "LOGBUS_ZOOKEEPER_SESSION_TIMEOUT_MS": "2000",
    "LOGBUS_REPLICA_LAG_TIME_MAX_MS": "2000",
    "LOGBUS_LEADER_IMBALANCE_CHECK_INTERVAL_MS": "1000",
}
READY_TIMEOUT_SECONDS = 30.0
WAIT_TIMEOUT_SECONDS = 30.0
HTTP_TIMEOUT_SECONDS = 5.0


class Cluster:
    """``size`` brokers (ids 1..size) over ``zookeeper``, all under ``workdir``.

    ``chroot``: the ZooKeeper path every broker is given (``--zookeeper HOST:PORT/chroot``).
    ``create_chroot``: create it before the brokers start (Kafka creates it itself, and so
    should we, so this is off by default).
    """

    def __init__(
        self,
        workdir: Path,
        zookeeper: ZooKeeperServer,
        size: int = 3,
        *,
        chroot: str = "/logbus",
        env: dict[str, str] | None = None,
        create_chroot: bool = False,
        access: Access | None = None,
        kafka: bool | Mapping[int, int] = False,
    ) -> None:
        assert size >= 1
        assert chroot.startswith("/") or chroot == ""
        self.workdir = workdir
        self.zookeeper = zookeeper
        self.chroot = chroot
        self.create_chroot = create_chroot
        self.env = {**DEFAULT_ENV, **(env or {})}
        self.access = access or Access()
        # ``kafka``: True, each broker also serves a Kafka listener on a port of its own,
        # picked now and kept across restarts (``kafka_bootstrap``, ``kafka_ports``); a
        # mapping {broker id: port} gives listeners to those brokers only.
        self.kafka_ports: dict[int, int] = (
            dict(kafka)
            if isinstance(kafka, Mapping)
            else {broker_id: conftest.free_port() for broker_id in range(1, size + 1)}
            if kafka
            else {}
        )
        self.brokers: dict[int, conftest.Broker] = {
            broker_id: self._make_broker(broker_id) for broker_id in range(1, size + 1)
        }

    def _make_broker(self, broker_id: int) -> conftest.Broker:
        def args(port: int) -> list[str]:
            return [
                "--broker-id",
                str(broker_id),
                "--zookeeper",
                self.zookeeper_connect,
                "--advertised-url",
                f"{self.access.scheme}://127.0.0.1:{port}",
                *(
                    ["--kafka-listener", f"127.0.0.1:{self.kafka_ports[broker_id]}"]
                    if broker_id in self.kafka_ports
                    else []
                ),
            ]

        self.workdir.mkdir(parents=True, exist_ok=True)
        broker = conftest.Broker(
            self.workdir / f"broker{broker_id}",
            self.workdir / f"broker{broker_id}.log",
            self.env,
            args=args,
            keep_port=True,
        )
        broker.scheme, broker.verify = self.access.scheme, self.access.verify
        return broker

    # ------------------------------------------------------------ whole cluster

    @property
    def zookeeper_connect(self) -> str:
        """What the brokers get as ``--zookeeper``: ``127.0.0.1:PORT/chroot``."""
        return self.zookeeper.connect_string + self.chroot

    @property
    def ids(self) -> list[int]:
        return sorted(self.brokers)

    @property
    def urls(self) -> list[str]:
        """Every broker's URL in id order (running or not: a URL never changes)."""
        return [self.brokers[i].url for i in self.ids]

    @property
    def live_ids(self) -> list[int]:
        """Brokers whose process runs and is not paused."""
        return [i for i in self.ids if self.brokers[i].running and not self.brokers[i].paused]

    def start(self, *, wait_for_metadata: bool = True) -> Cluster:
        """Start ZooKeeper (unless running) and every stopped broker, in parallel; wait for
        /readyz on each and, with ``wait_for_metadata``, until /metadata lists them all and a
        controller."""
        if not self.zookeeper.running:
            self.zookeeper.start()
        if self.create_chroot and self.chroot:
            with self.kazoo(chroot=False) as zk:
                zk.ensure_path(self.chroot)
        starting = [b for b in self.brokers.values() if b.proc is None]
        for broker in starting:
            broker.launch()
        for broker in starting:
            if not broker.wait_ready(READY_TIMEOUT_SECONDS):
                broker.proc = None
                broker.start()  # once more: the first port picked may have been taken
        if wait_for_metadata:
            self.wait_for_brokers()
        return self

    def stop(self, *, stop_zookeeper: bool = True) -> dict[int, int]:
        """SIGTERM every running broker at once, wait for all (SIGKILL after the timeout),
        then stop ZooKeeper (unless told not to). Returns {broker id: exit status} of the
        brokers that ran (-9: ignored SIGTERM and was killed)."""
        if self.zookeeper.paused:
            self.zookeeper.resume()  # brokers close their sessions on the way out
        running = {i: b for i, b in self.brokers.items() if b.proc is not None}
        for broker in running.values():
            assert broker.proc is not None
            if broker.paused:
                broker.resume()
            with suppress(ProcessLookupError):
                broker.proc.send_signal(signal.SIGTERM)
        codes: dict[int, int] = {}
        deadline = time.monotonic() + conftest.STOP_TIMEOUT_SECONDS
        for broker_id, broker in running.items():
            assert broker.proc is not None
            try:
                codes[broker_id] = broker.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                broker.proc.kill()
                broker.proc.wait()
                codes[broker_id] = -signal.SIGKILL
            broker.proc = None
            broker.paused = False
        if stop_zookeeper:
            self.zookeeper.close()
        return codes

    def wait_for_brokers(
        self, ids: list[int] | None = None, timeout: float = WAIT_TIMEOUT_SECONDS
    ) -> dict[str, Any]:
        """Wait until /metadata lists exactly ``ids`` (default: the live brokers) as live and
        names a controller among them; returns that metadata."""
        want = sorted(ids if ids is not None else self.live_ids)

        def settled() -> dict[str, Any] | None:
            meta = self.metadata()
            live = sorted(int(b["id"]) for b in meta.get("brokers", []))
            controller = meta.get("controller")
            if isinstance(controller, dict):
                controller = controller.get("id", controller.get("broker_id"))
            return meta if live == want and controller in want else None

        return self.wait_until(settled, timeout, f"brokers {want} registered with a controller")

    def kafka_bootstrap(self, broker_id: int) -> str:
        """``127.0.0.1:PORT`` of one broker's Kafka listener (a cluster made with ``kafka``)."""
        return f"127.0.0.1:{self.kafka_ports[broker_id]}"

    # ------------------------------------------------------------ one broker

    def broker(self, broker_id: int) -> conftest.Broker:
        return self.brokers[broker_id]

    def url(self, broker_id: int) -> str:
        return self.brokers[broker_id].url

    def client(self, broker_id: int, **kwargs: Any) -> httpx.Client:
        """An httpx client on one broker (redirects not followed unless asked)."""
        return httpx.Client(
            base_url=self.url(broker_id), timeout=30, **{**self.access.http(), **kwargs}
        )

    def kill(self, broker_id: int) -> None:
        """SIGKILL: no shutdown code runs; its ZooKeeper session expires on its own."""
        self.brokers[broker_id].kill()

    def stop_broker(self, broker_id: int) -> int:
        """SIGTERM and wait (controlled shutdown); the exit status."""
        return self.brokers[broker_id].stop()

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker hangs (sockets open, nothing answered, no ZK heartbeats)."""
        self.brokers[broker_id].pause()

    def resume(self, broker_id: int) -> None:
        self.brokers[broker_id].resume()

    def restart(self, broker_id: int, *, wait: bool = True) -> conftest.Broker:
        """SIGTERM it when running (a killed broker just starts), start it on the same data
        dir and port, wait for /readyz and, with ``wait``, for /metadata to list it."""
        broker = self.brokers[broker_id]
        if broker.proc is not None:
            broker.stop()
        broker.start()
        if wait:
            self.wait_for_brokers()
        return broker

    # ------------------------------------------------------------ observation

    def metadata(self, broker_id: int | None = None) -> dict[str, Any]:
        """GET /metadata from ``broker_id``, or from the first live broker that answers."""
        candidates = [broker_id] if broker_id is not None else self.live_ids
        errors: list[str] = []
        for i in candidates:
            try:
                response = httpx.get(
                    f"{self.url(i)}/metadata", timeout=HTTP_TIMEOUT_SECONDS, **self.access.http()
                )
                response.raise_for_status()
                answer: dict[str, Any] = response.json()
                return answer
            except httpx.HTTPError as exc:
                errors.append(f"broker {i}: {exc!r}")
        raise httpx.TransportError("no broker answered /metadata: " + "; ".join(errors))

    def partition(self, topic: str, partition: int = 0) -> dict[str, Any]:
        """One partition's entry of /metadata (``leader``, ``leader_epoch``, ``replicas``,
        ``isr``); KeyError while the topic or partition is not there yet."""
        return find_partition(self.metadata(), topic, partition)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The partition's leader id per /metadata (-1 while there is none)."""
        return int(self.partition(topic, partition)["leader"])

    def wait_until(
        self,
        predicate: Callable[[], T | None],
        timeout: float = WAIT_TIMEOUT_SECONDS,
        message: str = "condition",
        interval: float = 0.1,
    ) -> T:
        """Call ``predicate`` until it returns something truthy, and return that. HTTP errors
        and KeyError/IndexError (a cluster in transition) count as not yet. On timeout: an
        AssertionError naming ``message``, the last error and the tails of the logs."""
        return wait_until(predicate, timeout, message, interval, logs=self.logs)

    @contextmanager
    def kazoo(self, *, chroot: bool = True, timeout: float = 10.0) -> Iterator[KazooClient]:
        """A started kazoo client (inside the chroot by default), stopped on exit."""
        hosts = self.zookeeper_connect if chroot else self.zookeeper.connect_string
        client = KazooClient(hosts=hosts, timeout=timeout)
        client.start(timeout=timeout)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def logs(self) -> dict[str, str]:
        """Every log by name (zookeeper.log, broker1.log...)."""
        out = {self.zookeeper.log_path.name: self.zookeeper.log()}
        for broker in self.brokers.values():
            out[broker.log_path.name] = broker.log()
        return out


def find_partition(meta: dict[str, Any], topic: str, partition: int) -> dict[str, Any]:
    """A partition's entry in /metadata, whether topics are a list of ``{"name"|"topic",
    "partitions": [...]}`` or a mapping by name, and partitions a list or a mapping."""
    topics = meta["topics"]
    if isinstance(topics, dict):
        entry = topics[topic]
    else:
        entry = next(t for t in topics if t.get("name", t.get("topic")) == topic)
    partitions = entry["partitions"] if isinstance(entry, dict) else entry
    if isinstance(partitions, dict):
        found: dict[str, Any] = partitions[str(partition)]
        return found
    return next(p for p in partitions if p.get("partition", p.get("id")) == partition)


def assert_acked_once_in_order(acked: list[int], seen: list[int]) -> None:
    """The kill-leader check: every acknowledged record read back exactly once, in the
    order it was sent (records sent but not acknowledged may follow, once)."""
    assert seen[: len(acked)] == acked
    assert len(seen) == len(set(seen))


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = WAIT_TIMEOUT_SECONDS,
    message: str = "condition",
    interval: float = 0.1,
    logs: Callable[[], dict[str, str]] | None = None,
) -> T:
    """See Cluster.wait_until; ``logs`` adds log tails to the failure message."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    last_value: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last_value, last_error = value, None
        except (httpx.HTTPError, KeyError, IndexError, StopIteration) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            break
        time.sleep(interval)
    detail = f"last error: {last_error!r}" if last_error else f"last value: {last_value!r}"
    text = f"timed out after {timeout:g} s waiting for {message} ({detail})"
    for name, log in (logs() if logs else {}).items():
        text += f"\n--- {name} (last 40 lines)\n" + "\n".join(log.splitlines()[-40:])
    raise AssertionError(text)
