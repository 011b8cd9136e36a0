"""End-to-end fixtures: a real ``logbus serve`` subprocess on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    """One broker process over one data dir; can be stopped, killed and started again."""

    def __init__(self, data_dir: Path, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.env = env or {}
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def clean_shutdown_marker(self) -> Path:
        return self.data_dir / ".clean_shutdown"

    def start(self) -> Broker:
        assert self.proc is None, "broker already running"
        # A port chosen now could be taken before the broker binds it; retry then.
        for _ in range(3):
            self.port = free_port()
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
                    ],
                    cwd=REPO,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self._wait_ready():
                return self
            self.proc = None
        raise AssertionError(f"broker did not become ready:\n{self.log()}")

    def _wait_ready(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
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

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)  # type: ignore[arg-type]

    def metric(self, name: str) -> float:
        """A sample of /metrics (0 when absent, as for a counter never incremented)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
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


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """Show the broker logs of a failed test: the cause is often only there."""
    if call.when != "call" or call.excinfo is None:
        return
    factory = getattr(item, "funcargs", {}).get("broker_factory")
    for broker in factory or []:
        item.add_report_section("call", f"broker log {broker.log_path.name}", broker.log())
