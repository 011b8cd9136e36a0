"""What TLS and what authentication + authorization cost on produce and fetch, binary and
JSON, as ratios to a plaintext, anonymous broker measured in the same run.

Three brokers side by side, driven alternately round after round so the load on the
shared machine hits all alike; each figure is the median of the rounds:

- ``plain``: default settings (plaintext, anonymous);
- ``tls``: the same with a trustme certificate (``https://``, TLS 1.3, Python's ``ssl``);
- ``auth``: plaintext with ``authentication=basic`` and ``authorizer=acl``, every request
  carrying ``User:alice``'s Basic credentials and alice holding exactly READ and WRITE on
  the topics (checked by the ACL authorizer on every request; credentials and decisions
  come from the broker's caches after the first request, as for any client that keeps
  its credentials).

Figures:

- binary produce: prebuilt ~1 MiB RecordBatches, two requests in flight (as
  ``bench.http_produce``), MB/s;
- binary fetch: a ~256 MiB partition read whole in 8 MiB binary fetches on one
  keep-alive connection, MB/s. Plaintext leaves by ``os.sendfile`` (zero-copy); over
  TLS the broker reads the segment and writes through the SSL transport;
- JSON produce: 1,000 100-byte string values a request, two in flight, records/s;
- JSON fetch: 100,000 such records read in 1 MiB JSON fetches on one connection
  (the client parses each answer), records/s.

Ratios: ``tls / plain`` and ``auth / plain`` of each figure, the median over the rounds
of each round's ratio (the figures of a round are taken one right after the other).
Beside each rate, the broker's CPU seconds per GB (binary) or per million records
(JSON), from ``/proc/<pid>/stat``, and its ratio likewise: on a shared, loaded machine
the CPU a request costs the broker is a much steadier measure than a rate. The client is the
standard library's ``http.client`` (with the same :class:`ssl.SSLContext` the SDK
uses): it runs on the same two cores as the broker, so the TLS ratio counts both
sides' encryption.

Run: ``python -m bench.tls`` (or ``python -m bench.run --only tls``, which records the
figures in bench/results.json and bench/RESULTS.md).
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import httpx
import orjson

from app.common import tls
from bench.common import free_port, machine, wait_until
from bench.http_produce import one_mib_batch

FETCH_BYTES = 256 << 20
FETCH_MAX = 8 << 20
JSON_PER_REQUEST = 1000
JSON_PRODUCE_REQUESTS = 200
JSON_FETCH_RECORDS = 100_000
JSON_FETCH_MAX = 1 << 20
VALUE = "v" * 100
ADMIN = ("admin", "admin-secret-1")
ALICE = ("alice", "alice-secret-1")
TOPICS = ("p", "f", "jp", "jf")
FIGURES = ("produce", "fetch", "json_produce", "json_fetch")


@contextlib.contextmanager
def _pki() -> Iterator[dict[str, str]]:
    import trustme

    root = Path(tempfile.mkdtemp(prefix="logbus-tls-"))
    try:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        paths = {k: str(root / f"{k}.pem") for k in ("ca", "cert", "key")}
        ca.cert_pem.write_to_path(paths["ca"])
        cert.cert_chain_pems[0].write_to_path(paths["cert"])
        cert.private_key_pem.write_to_path(paths["key"])
        yield paths
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def _broker(
    env: dict[str, str], scheme: str, verify: ssl.SSLContext | bool
) -> Iterator[tuple[str, int]]:
    """A ``logbus serve`` over a fresh data dir: (its URL, its pid)."""
    port = free_port()
    data = tempfile.mkdtemp(prefix="logbus-bench-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--data-dir", data, "--port", str(port)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"{scheme}://127.0.0.1:{port}"
    try:
        wait_until(lambda: httpx.get(f"{url}/readyz", verify=verify).status_code == 200)
        yield url, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(data, ignore_errors=True)


def _connect(url: str, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    host, port = url.split("://")[1].split(":")
    if context is None:
        return http.client.HTTPConnection(host, int(port), timeout=60)
    return http.client.HTTPSConnection(host, int(port), timeout=60, context=context)


@dataclass(frozen=True)
class Target:
    """A broker under test: its URL, the TLS context to reach it (None: plaintext) and the
    headers every request carries (the credentials)."""

    url: str
    context: ssl.SSLContext | None = None
    headers: dict[str, str] = field(default_factory=dict)
    pid: int = 0  # the broker's, for its CPU time


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post_loop(target: Target, path: str, body: bytes, content_type: str, requests: int) -> float:
    """Seconds to POST ``body`` ``requests`` times over two keep-alive connections."""
    headers = {"content-type": content_type, **target.headers}
    errors: list[str] = []

    def worker() -> None:
        conn = _connect(target.url, target.context)
        try:
            for _ in range(requests // 2):
                conn.request("POST", path, body, headers)
                response = conn.getresponse()
                answer = response.read()
                if response.status >= 300:
                    errors.append(answer.decode(errors="replace"))
                    return
        finally:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(errors[0])
    return elapsed


def produce_mb_per_s(target: Target, topic: str, requests: int = 200) -> float:
    batch, _ = one_mib_batch()
    path = f"/topics/{topic}/partitions/0/batches"
    elapsed = _post_loop(target, path, batch, "application/octet-stream", requests)
    return (requests // 2) * 2 * len(batch) / elapsed / 1e6


def json_produce_records_per_s(
    target: Target, topic: str, requests: int = JSON_PRODUCE_REQUESTS
) -> float:
    body = orjson.dumps(
        {"value_format": "string", "records": [{"value": VALUE}] * JSON_PER_REQUEST}
    )
    path = f"/topics/{topic}/partitions/0/records"
    elapsed = _post_loop(target, path, body, "application/json", requests)
    return (requests // 2) * 2 * JSON_PER_REQUEST / elapsed


def _next_offset(body: bytes) -> int:
    """The offset after the last whole RecordBatch v2 in ``body`` (base + lastOffsetDelta + 1)."""
    pos, nxt = 0, -1
    while pos + 27 <= len(body):
        base, length = struct.unpack_from(">qi", body, pos)
        if pos + 12 + length > len(body):
            break
        (delta,) = struct.unpack_from(">i", body, pos + 23)
        nxt = base + delta + 1
        pos += 12 + length
    if nxt < 0:
        raise RuntimeError("no whole batch in a fetch answer")
    return nxt


def _fetch_loop(
    target: Target, topic: str, accept: str, max_bytes: int, enough: int, step: Any
) -> tuple[int, float]:
    """Fetch from offset 0 on one connection until ``step(body)`` (-> (units, next offset))
    added up ``enough`` units; (units, seconds)."""
    conn = _connect(target.url, target.context)
    headers = {"accept": accept, **target.headers}
    try:
        offset, total = 0, 0
        start = time.perf_counter()
        while total < enough:
            path = f"/topics/{topic}/partitions/0/records?offset={offset}&max_bytes={max_bytes}"
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200 or not body:
                raise RuntimeError(f"fetch at {offset}: {response.status} {body[:200]!r}")
            units, offset = step(body)
            if not units:
                raise RuntimeError(f"fetch at {offset}: nothing")
            total += units
        return total, time.perf_counter() - start
    finally:
        conn.close()


def fetch_mb_per_s(target: Target, topic: str) -> float:
    total, elapsed = _fetch_loop(
        target,
        topic,
        "application/octet-stream",
        FETCH_MAX,
        FETCH_BYTES,
        lambda body: (len(body), _next_offset(body)),
    )
    return total / elapsed / 1e6


def _json_step(body: bytes) -> tuple[int, int]:
    records = orjson.loads(body)["records"]
    return len(records), int(records[-1]["offset"]) + 1 if records else 0


def json_fetch_records_per_s(target: Target, topic: str) -> float:
    total, elapsed = _fetch_loop(
        target, topic, "application/json", JSON_FETCH_MAX, JSON_FETCH_RECORDS, _json_step
    )
    return total / elapsed


def _prepare(target: Target, admin: tuple[str, str] | None) -> None:
    """The topics (as ``admin`` on a secured broker, which also grants alice READ and
    WRITE on them), ``f`` filled with FETCH_BYTES of batches, ``jf`` with
    JSON_FETCH_RECORDS JSON records."""
    with httpx.Client(
        base_url=target.url, verify=target.context or True, timeout=60, auth=admin
    ) as c:
        for topic in TOPICS:
            c.post(
                "/topics",
                json={"name": topic, "partitions": 1, "configs": {"max.message.bytes": 4 << 20}},
            ).raise_for_status()
        if admin is not None:
            acls = [
                {"resource_type": "TOPIC", "resource_name": topic, "principal": "User:alice",
                 "operation": op}
                for topic in TOPICS
                for op in ("READ", "WRITE")
            ]  # fmt: skip
            c.post("/acls", json={"acls": acls}).raise_for_status()
    for _ in range(2):
        produce_mb_per_s(target, "f", requests=FETCH_BYTES >> 20)
    json_produce_records_per_s(target, "jf", requests=JSON_FETCH_RECORDS // JSON_PER_REQUEST)


def _rate(target: Target, figure: str) -> float:
    if figure == "produce":
        return produce_mb_per_s(target, "p")
    if figure == "fetch":
        return fetch_mb_per_s(target, "f")
    if figure == "json_produce":
        return json_produce_records_per_s(target, "jp")
    return json_fetch_records_per_s(target, "jf")


def _measure(target: Target, figure: str) -> tuple[float, float]:
    """(rate, broker CPU seconds per unit moved): per GB for the binary figures, per
    million records for the JSON ones. CPU time is far steadier than a rate on a shared
    machine: other processes' load stretches the wall time, not this broker's CPU."""
    cpu, start = _cpu_seconds(target.pid), time.perf_counter()
    rate = _rate(target, figure)
    used, elapsed = _cpu_seconds(target.pid) - cpu, time.perf_counter() - start
    per = 1e3 if figure in ("produce", "fetch") else 1e6  # MB in a GB, records in a million
    return rate, used / (rate * elapsed / per)


def run(runs: int = 7) -> dict[str, Any]:
    from app.core.security.users import UsersFile

    work = Path(tempfile.mkdtemp(prefix="logbus-tls-users-"))
    try:
        users = UsersFile(work / "users.json")
        for name, password in (ADMIN, ALICE):
            users.add(name, password)
        auth_env = {
            "LOGBUS_AUTHENTICATION": "basic",
            "LOGBUS_AUTHORIZER": "acl",
            "LOGBUS_SUPER_USERS": "User:admin",
            "LOGBUS_USERS_FILE": str(work / "users.json"),
        }
        basic = "Basic " + base64.b64encode(":".join(ALICE).encode()).decode()
        with _pki() as pem:
            context = tls.client_context(tls.ClientTls(pem["ca"]))
            tls_env = {"LOGBUS_SSL_CERTFILE": pem["cert"], "LOGBUS_SSL_KEYFILE": pem["key"]}
            with (
                _broker({}, "http", True) as (plain, plain_pid),
                _broker(tls_env, "https", context) as (secure, secure_pid),
                _broker(auth_env, "http", True) as (guarded, guarded_pid),
            ):
                targets = {
                    "plain": Target(plain, pid=plain_pid),
                    "tls": Target(secure, context, pid=secure_pid),
                    "auth": Target(guarded, None, {"authorization": basic}, guarded_pid),
                }
                for name, target in targets.items():
                    _prepare(target, ADMIN if name == "auth" else None)
                samples: dict[str, list[float]] = {}
                for _ in range(runs):
                    for figure in FIGURES:
                        for name, target in targets.items():
                            rate, cpu = _measure(target, figure)
                            samples.setdefault(f"{name}_{figure}", []).append(rate)
                            samples.setdefault(f"cpu_{name}_{figure}", []).append(cpu)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    units = {
        "produce": "mb_per_s",
        "fetch": "mb_per_s",
        "json_produce": "records_per_s",
        "json_fetch": "records_per_s",
    }
    cpu_units = {"produce": "gb", "fetch": "gb", "json_produce": "m", "json_fetch": "m"}
    result: dict[str, Any] = {}
    for name in ("plain", "tls", "auth"):
        for figure in FIGURES:
            result[f"{name}_{figure}_{units[figure]}"] = median(samples[f"{name}_{figure}"])
            cpu = median(samples[f"cpu_{name}_{figure}"])
            result[f"{name}_{figure}_broker_cpu_s_per_{cpu_units[figure]}"] = cpu

    def paired(key: str, name: str) -> float:
        # The median of each round's ratio: the figures of a round were taken one right
        # after the other, so a burst of load from elsewhere hits them alike.
        pairs = zip(samples[key.format(name)], samples[key.format("plain")], strict=True)
        return median(a / b for a, b in pairs)

    for figure in FIGURES:
        for name in ("tls", "auth"):
            result[f"{figure}_{name}_ratio"] = paired(f"{{}}_{figure}", name)
            result[f"{figure}_{name}_cpu_ratio"] = paired(f"cpu_{{}}_{figure}", name)
    result["samples"] = samples
    result["machine"] = machine()
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2, default=str))
