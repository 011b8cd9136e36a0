"""A real broker (``logbus serve`` in a subprocess) for the SDK tests, shared by the session.

A subprocess rather than a thread: the SDK's throughput paths hold the GIL
for long stretches, and a broker in the same interpreter would be starved
by them (and would starve them back) in ways no real deployment sees.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
_names = itertools.count()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(data_dir: Path, log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    # A port picked now may be taken before the broker binds it: try a few.
    for _ in range(5):
        port = _free_port()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "LOGBUS_NUM_PARTITIONS": "1"}
        env.pop("LOGBUS_CONFIG", None)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(data_dir),
                 "--port", str(port), "--log-level", "warning"],
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    return proc, url
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    raise RuntimeError(f"broker did not start; see {log_path}")


@pytest.fixture(scope="session")
def broker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("sdk-broker")
    proc, url = _start(base / "data", base / "broker.log")
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def make_topic(broker_url: str) -> Callable[..., str]:
    """Create a fresh topic; returns its name."""

    def make(partitions: int = 1, **configs: object) -> str:
        name = f"sdk-{os.getpid()}-{next(_names)}"
        body: dict[str, object] = {"name": name, "partitions": partitions}
        if configs:
            body["configs"] = {k.replace("_", "."): v for k, v in configs.items()}
        r = httpx.post(f"{broker_url}/topics", json=body, timeout=30)
        assert r.status_code == 201, r.text
        return name

    return make
