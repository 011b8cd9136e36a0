"""Shared helpers for the benchmarks: free ports, a broker and a Redis server as subprocesses."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.05)
    raise TimeoutError("service did not come up in time")


@contextlib.contextmanager
def broker(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """A `logbus serve` subprocess on a free loopback port and a fresh data dir; yields its URL."""
    with broker_process(extra_env) as (url, _pid):
        yield url


@contextlib.contextmanager
def broker_process(
    extra_env: dict[str, str] | None = None,
    *,
    data_dir: str | None = None,
    ready_timeout: float = 20.0,
) -> Iterator[tuple[str, int]]:
    """:func:`broker`, yielding its URL and process id (to read its memory from /proc).
    ``data_dir``: serve a data dir written beforehand (kept) instead of a fresh one
    (removed afterwards); ``ready_timeout``: seconds to wait for ``/readyz`` (a large
    data dir takes longer to load)."""
    port = free_port()
    data = data_dir or tempfile.mkdtemp(prefix="logbus-bench-")
    env = {**os.environ, **(extra_env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--data-dir", data, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{url}/readyz").status_code == 200, ready_timeout)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if data_dir is None:
            shutil.rmtree(data, ignore_errors=True)


@contextlib.contextmanager
def redis_server() -> Iterator[int]:
    """Debian's redis-server on a free port, persistence off (Logbus does not fsync either)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RuntimeError(
            "redis-server is missing: apt-get install redis-server (make bench does)"
        )
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="logbus-redis-")
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import redis

        wait_until(lambda: bool(redis.Redis(port=port).ping()))
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def warm_memory(megabytes: int = 4096) -> None:
    """Touch ``megabytes`` of page cache once, then free it.

    On these VMs the first touch of a guest page costs a host fault: a broker
    writing into never-used memory measured ~400 MB/s, the same writes into
    memory touched once ~5 GB/s. A long-running server lives in the second
    case, so every write benchmark starts after this.
    """
    chunk = b"\0" * (1 << 20)
    fd, path = tempfile.mkstemp(prefix="logbus-warm-")
    try:
        for i in range(megabytes):
            os.pwrite(fd, chunk, i << 20)
    finally:
        os.close(fd)
        os.unlink(path)


def median_of(runs: int, fn: Callable[[], float]) -> tuple[float, list[float]]:
    """Run ``fn`` ``runs`` times; return the median and all samples (machines here are noisy)."""
    samples = [fn() for _ in range(runs)]
    return statistics.median(samples), samples


def machine() -> dict[str, str]:
    def sh(cmd: str) -> str:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "nproc": sh("nproc"),
        "free -h": sh("free -h | sed -n 2p"),
        "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip(),
        "python": sys.version.split()[0],
        "redis-server": sh("redis-server --version | cut -d' ' -f3"),
        "data dir fs": sh(f"df -hT {Path(tempfile.gettempdir())} | tail -1 | awk '{{print $2}}'"),
    }
