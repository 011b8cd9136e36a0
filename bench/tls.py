"""What TLS costs: binary produce and binary fetch over https as ratios to plaintext, same run.

Two brokers side by side (one plaintext, one with a trustme certificate), driven
alternately round after round so the load on the shared machine hits both alike;
each figure is the median of the rounds and the ratio is TLS / plaintext.

- produce: prebuilt ~1 MiB RecordBatches, two requests in flight (as
  ``bench.http_produce``);
- fetch: a ~64 MiB partition read whole in 8 MiB binary fetches on one
  keep-alive connection. Plaintext leaves by ``os.sendfile`` (zero-copy);
  over TLS the broker reads the segment and writes through the SSL transport.

The client is the standard library's ``http.client`` (with the same
:class:`ssl.SSLContext` the SDK uses): it reads TLS in the same process, on the
same two cores as the broker, so the ratio counts both sides' encryption.

Run: ``python -m bench.tls`` (or ``python -m bench.run --only tls``).
"""

from __future__ import annotations

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
from pathlib import Path
from statistics import median
from typing import Any

import httpx

from app.common import tls
from bench.common import free_port, machine, wait_until
from bench.http_produce import one_mib_batch

FETCH_BYTES = 64 << 20
FETCH_MAX = 8 << 20


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
def _broker(env: dict[str, str], scheme: str, verify: ssl.SSLContext | bool) -> Iterator[str]:
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
        yield url
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


def produce_mb_per_s(
    url: str, context: ssl.SSLContext | None, topic: str, requests: int = 200
) -> float:
    batch, _ = one_mib_batch()
    headers = {"content-type": "application/octet-stream"}
    errors: list[str] = []

    def worker() -> None:
        conn = _connect(url, context)
        try:
            for _ in range(requests // 2):
                conn.request("POST", f"/topics/{topic}/partitions/0/batches", batch, headers)
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
    return (requests // 2) * 2 * len(batch) / elapsed / 1e6


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


def fetch_mb_per_s(url: str, context: ssl.SSLContext | None, topic: str) -> float:
    conn = _connect(url, context)
    try:
        offset, total = 0, 0
        start = time.perf_counter()
        while total < FETCH_BYTES:
            conn.request(
                "GET",
                f"/topics/{topic}/partitions/0/records?offset={offset}&max_bytes={FETCH_MAX}",
                headers={"accept": "application/octet-stream"},
            )
            response = conn.getresponse()
            body = response.read()
            if response.status != 200 or not body:
                raise RuntimeError(f"fetch at {offset}: {response.status}")
            total += len(body)
            offset = _next_offset(body)
        return total / (time.perf_counter() - start) / 1e6
    finally:
        conn.close()


def _fill(url: str, context: ssl.SSLContext | None, topic: str) -> None:
    with httpx.Client(base_url=url, verify=context or True, timeout=60) as c:
        c.post(
            "/topics",
            json={"name": topic, "partitions": 1, "configs": {"max.message.bytes": 4 << 20}},
        )
    for _ in range(2):
        produce_mb_per_s(url, context, topic, requests=FETCH_BYTES >> 20)


def run(runs: int = 5) -> dict[str, Any]:
    with _pki() as pem:
        context = tls.client_context(tls.ClientTls(pem["ca"]))
        tls_env = {"LOGBUS_SSL_CERTFILE": pem["cert"], "LOGBUS_SSL_KEYFILE": pem["key"]}
        with _broker({}, "http", True) as plain, _broker(tls_env, "https", context) as secure:
            targets = {"plain": (plain, None), "tls": (secure, context)}
            for url, ctx in targets.values():
                with httpx.Client(base_url=url, verify=ctx or True) as c:
                    c.post(
                        "/topics",
                        json={
                            "name": "p",
                            "partitions": 1,
                            "configs": {"max.message.bytes": 4 << 20},
                        },
                    )
                _fill(url, ctx, "f")
            samples: dict[str, list[float]] = {}
            for _ in range(runs):
                for name, (url, ctx) in targets.items():
                    samples.setdefault(f"{name}_produce", []).append(
                        produce_mb_per_s(url, ctx, "p")
                    )
                    samples.setdefault(f"{name}_fetch", []).append(fetch_mb_per_s(url, ctx, "f"))
    result: dict[str, Any] = {f"{k}_mb_per_s": median(v) for k, v in samples.items()}
    for op in ("produce", "fetch"):
        result[f"{op}_tls_ratio"] = result[f"tls_{op}_mb_per_s"] / result[f"plain_{op}_mb_per_s"]
    result["samples"] = samples
    result["machine"] = machine()
    return result


if __name__ == "__main__":
    print(json.dumps(run(), indent=2, default=str))
