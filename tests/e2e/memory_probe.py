"""Measuring a ``logbus serve`` process's memory from outside, for the memory-budget tests
(tests/e2e/test_e2e_memory.py) and benchmark (bench/memory_budget.py): the same probe in
both, so a figure in bench/RESULTS.md and a test's bound are measured the same way.

* :func:`proc_mb`: ``VmRSS`` (resident now) or ``VmHWM`` (the peak) from ``/proc``, in MB;
* :func:`rss_during_crowd`: the broker's RSS while a crowd of WebSocket subscribers that
  never read is connected (issue #12's reproducer), the crowd gone on return.

Linux only (``/proc``). Not thread-safe: one crowd at a time per event loop it creates.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

# Subscribed with all the credit a client could grant: the broker may send everything.
SUBSCRIBE = orjson.dumps(
    {
        "type": "subscribe",
        "topics": ["loaded"],
        "start": "earliest",
        "format": "json",
        "value_format": "string",
        "credit": {"records": 1 << 40},
    }
).decode()


def proc_mb(pid: int, field: str = "VmRSS") -> float:
    """``field`` of ``/proc/<pid>/status`` in MB; LookupError when the kernel has none."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise LookupError(f"no {field} in /proc/{pid}/status")


async def never_reading_subscribers(url: str, count: int, open_timeout: float) -> list[Any]:
    """``count`` WebSocket connections to ``url`` (``ws://host:port/ws/subscribe``), each
    subscribed to ``loaded`` with unlimited credit, none of which reads."""
    from websockets.asyncio.client import connect

    port = urlsplit(url).port
    opened = []
    for _ in range(count):
        # A small receive buffer: the kernel absorbs little, what the broker sends stays
        # in its own buffers. max_queue=1: the library stops reading once a frame waits,
        # as a client that never reads would.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        ws = await connect(url, sock=sock, max_size=None, max_queue=1, open_timeout=open_timeout)
        await ws.send(SUBSCRIBE)
        opened.append(ws)
    return opened


def rss_during_crowd(
    url: str,
    pid: int,
    count: int,
    hold_s: float,
    *,
    open_timeout: float = 30,
    meanwhile: Callable[[], object] = lambda: None,
) -> float:
    """Broker ``pid``'s RSS (MB) ``hold_s`` after ``count`` never-reading subscribers
    connected to ``url``; ``meanwhile`` runs while they are still connected. They are
    dropped (aborted, as a vanished client) before this returns, and the broker is given
    half a second to notice."""
    loop = asyncio.new_event_loop()
    try:
        opened = loop.run_until_complete(never_reading_subscribers(url, count, open_timeout))
        loop.run_until_complete(asyncio.sleep(hold_s))
        during = proc_mb(pid)
        meanwhile()
        for ws in opened:
            ws.transport.abort()
        loop.run_until_complete(asyncio.sleep(0.5))
    finally:
        loop.close()
    return during
