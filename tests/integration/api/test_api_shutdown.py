"""What a broker stop must not wait for: its long polls are answered at once
(app/api/server.py, LogbusServer), and a request whose client went away in the middle of
its body is dropped when the connection ends, not at the body timeout
(app/api/protocol.py).

The served stack (uvicorn with the broker's protocol and lifespan) runs in a thread of
this process, so the test can see the long poll parked in the app's waiters before it
asks the server to stop.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.api.server import LogbusServer, build_config
from app.config import Settings


class _Unsettled(LogbusServer):
    """The broker's server without the collector settling, which is process-wide (it
    would freeze this test process's objects)."""

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await uvicorn.Server.startup(self, sockets)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _until(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_stopping_server_answers_its_long_polls_with_what_they_have(tmp_path: Path) -> None:
    """A fetch parked for 30 s gets its (empty) answer when the broker stops, as Kafka
    completes its delayed fetches at shutdown. Before, uvicorn waited out its graceful
    shutdown (5 s) for it and then cancelled it: the client got no answer at all, and
    every broker stop with a consumer attached took those 5 s."""
    settings = Settings(data_dir=tmp_path, port=_free_port())
    config = build_config(settings, zerocopy=False, loop="asyncio", log_level="warning")
    waiters = config.app.state.logbus.waiters  # type: ignore[union-attr]
    server = _Unsettled(config, 0)
    serving = threading.Thread(target=server.run)
    serving.start()
    answers: list[httpx.Response] = []
    try:
        _until(lambda: server.started, "the server starts")
        url = f"http://127.0.0.1:{settings.port}"
        with httpx.Client(base_url=url, timeout=60) as client:
            assert client.post("/topics", json={"name": "quiet"}).status_code == 201

        def long_poll() -> None:
            with httpx.Client(base_url=url, timeout=60) as client:
                answers.append(
                    client.get(
                        "/topics/quiet/partitions/0/records",
                        params={"offset": 0, "max_wait_ms": 30_000},
                    )
                )

        polling = threading.Thread(target=long_poll)
        polling.start()
        _until(lambda: waiters.waiting() == 1, "the fetch parks")
        server.should_exit = True
        polling.join(60)
    finally:
        server.should_exit = True
        serving.join(60)
    assert not serving.is_alive()
    assert [r.status_code for r in answers] == [200]
    assert answers[0].json()["records"] == []


@contextmanager
def _served(settings: Settings) -> Iterator[_Unsettled]:
    server = _Unsettled(build_config(settings, zerocopy=False, loop="asyncio"), 0)
    serving = threading.Thread(target=server.run)
    serving.start()
    try:
        _until(lambda: server.started, "the server starts")
        yield server
    finally:
        server.should_exit = True
        serving.join(60)
    assert not serving.is_alive()


def test_a_client_gone_in_the_middle_of_a_body_ends_its_request_at_once(tmp_path: Path) -> None:
    """A produce whose client stops sending half-way through the declared body and closes
    its side (as a killed producer's socket does): the broker closes the connection at
    once. Before, it waited out the body timeout (two minutes by default) holding the
    request, its connection and the body's memory reservation; a half-close after a
    complete request is still answered (tests/e2e/test_e2e_limits.py)."""
    settings = Settings(data_dir=tmp_path, port=_free_port())
    with _served(settings), socket.create_connection(("127.0.0.1", settings.port)) as sock:
        sock.sendall(
            b"POST /topics/t/partitions/0/records HTTP/1.1\r\nHost: x\r\n"
            b'content-type: application/json\r\ncontent-length: 100\r\n\r\n{"rec'
        )
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(30)  # far below the 120-s body timeout
        assert sock.recv(1) == b""
