"""Free loopback ports for the brokers, ZooKeepers and listeners the tests start.

One module for the whole suite (tests/ is on sys.path through its conftest.py), so one
process never hands the same port out twice, whichever harness asks.
"""

from __future__ import annotations

import socket

# Every port free_port() handed out in this process.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one this process was given before: the
    kernel may hand a port it just gave (and that was closed at once) out again before
    the first taker binds it (a cluster's brokers once got the same one; a broker's HTTP
    and Kafka ports must differ)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
