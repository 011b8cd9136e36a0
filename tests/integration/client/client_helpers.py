"""Helpers for the SDK tests (a unique module name: test dirs are not packages)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from app.common.batch import BatchHeader, iter_headers


def raw_batches(url: str, topic: str, partition: int, offset: int = 0) -> list[BatchHeader]:
    """Every batch header of a partition from ``offset``, read with plain httpx."""
    headers: list[BatchHeader] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        while True:
            r = client.get(
                f"/topics/{topic}/partitions/{partition}/records",
                params={"offset": offset, "max_wait_ms": 0},
                headers={"accept": "application/octet-stream"},
            )
            assert r.status_code == 200, r.text
            found = [h for _, h in iter_headers(r.content)]
            if not found:
                return headers
            headers.extend(found)
            offset = found[-1].next_offset


def high_watermarks(url: str, topic: str) -> list[int]:
    r = httpx.get(f"{url}/topics/{topic}", timeout=30)
    assert r.status_code == 200, r.text
    return [p["high_watermark"] for p in r.json()["partitions"]]


class FaultyTransport(httpx.AsyncBaseTransport):
    """A real transport to the real broker that fails chosen produce requests.

    ``plan(n)`` is asked for the n-th binary produce request (from 0) and
    answers ``None`` (pass through), ``"connect"`` (fail before sending),
    ``"lost"`` (send it, let the broker append, then lose the answer) or an
    ``httpx.Response`` to answer instead of the broker.
    """

    def __init__(self, plan: Callable[[int], object]) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.plan = plan
        self.produce_requests = 0
        self.delay = 0.0
        # Paths answered 404 as by a broker that predates them.
        self.missing_paths: set[str] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path in self.missing_paths:
            return error_response(404, "INVALID_REQUEST", False)
        if not request.url.path.endswith("/batches"):
            return await self.inner.handle_async_request(request)
        n = self.produce_requests
        self.produce_requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        action = self.plan(n)
        if action == "connect":
            raise httpx.ConnectError("injected: connection refused", request=request)
        if action == "lost":
            response = await self.inner.handle_async_request(request)
            await response.aread()
            raise httpx.ReadError("injected: connection reset before the answer", request=request)
        if isinstance(action, httpx.Response):
            return action
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def error_response(status: int, code: str, retriable: bool) -> httpx.Response:
    return httpx.Response(
        status, json={"error_code": code, "message": f"injected {code}", "retriable": retriable}
    )


class CuttingProxy:
    """A TCP proxy to the real broker that cuts chosen connections mid-answer.

    ``cut(n)`` is asked for the n-th accepted connection (from 0): a number of
    bytes after which the broker's answer is cut (the connection is closed),
    or None to pass everything through.
    """

    def __init__(self, target_url: str, cut: Callable[[int], int | None]) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.cut = cut
        self.connections = 0
        self.cuts = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            n = self.connections
            self.connections += 1
            upstream = socket.create_connection(self.target)
            limit = self.cut(n)
            threading.Thread(target=self._pipe, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, limit), daemon=True).start()

    def _pipe(self, src: Any, dst: Any, limit: int | None) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) >= limit:
                    dst.sendall(data[: max(0, limit - sent)])
                    self.cuts += 1
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self.listener.close()
