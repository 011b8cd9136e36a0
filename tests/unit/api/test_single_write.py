"""The single-write response path (app/api/single_write.py ``single_write``/``HeadWithBody``).

It changes how many ``transport.write`` calls carry an answer, never its bytes: the
property test drives uvicorn's own ``RequestResponseCycle`` with the same ASGI messages
through its plain ``send`` and through ``single_write`` and compares what each wrote;
the socket test compares raw byte streams of stock uvicorn and Logbus's protocols.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from app.api.single_write import SINGLE_WRITE_MAX_BODY_BYTES, single_write
from app.api.zerocopy_protocol import PlainHttpToolsProtocol, ZeroCopyHttpToolsProtocol


class RecordingTransport(asyncio.Transport):
    """Keeps every write as its own entry: what the test compares is the writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _cycle(transport: RecordingTransport, method: str, keep_alive: bool) -> RequestResponseCycle:
    scope: Any = {"type": "http", "method": method, "path": "/", "http_version": "1.1"}
    return RequestResponseCycle(
        scope=scope,
        transport=transport,
        flow=FlowControl(transport),
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=[(b"server", b"t")],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )


def _app(messages: list[dict[str, Any]]) -> Any:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        for message in messages:
            await send(message)

    return app


def _run(
    messages: list[dict[str, Any]], method: str, keep_alive: bool, single: bool
) -> tuple[RecordingTransport, str | None, bool]:
    transport = RecordingTransport()
    cycle = _cycle(transport, method, keep_alive)
    app = _app(messages)
    error = None

    async def go() -> None:
        nonlocal error
        try:
            if single:
                await single_write(app, cycle)(cycle.scope, cycle.receive, cycle.send)
            else:
                await app(cycle.scope, cycle.receive, cycle.send)
        except RuntimeError as exc:
            error = str(exc)
        # What uvicorn's run_asgi does with an answer left incomplete.
        if cycle.response_started and not cycle.response_complete:
            cycle.transport.close()

    asyncio.run(go())
    return transport, error, cycle.response_complete


_bodies = st.lists(
    st.one_of(
        st.binary(max_size=64),
        st.just(b"x" * SINGLE_WRITE_MAX_BODY_BYTES),
        st.just(b"y" * (SINGLE_WRITE_MAX_BODY_BYTES + 1)),
    ),
    min_size=0,
    max_size=4,
)


@st.composite
def _answers(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str, bool]:
    chunks = draw(_bodies)
    status = draw(st.sampled_from([200, 201, 204, 304, 400, 404, 500]))
    framing = draw(st.sampled_from(["length", "chunked", "none", "wrong-length"]))
    headers = [(b"content-type", b"application/json")]
    total = sum(map(len, chunks))
    if framing == "length":
        headers.append((b"content-length", str(total).encode()))
    elif framing == "wrong-length":
        headers.append((b"content-length", str(total + draw(st.sampled_from([-1, 1]))).encode()))
    elif framing == "chunked":
        headers.append((b"transfer-encoding", b"chunked"))
    if draw(st.booleans()):
        headers.append((b"connection", b"close"))
    messages: list[dict[str, Any]] = [
        {"type": "http.response.start", "status": status, "headers": headers}
    ]
    last = len(chunks) - 1
    messages += [
        {"type": "http.response.body", "body": chunk, "more_body": i < last}
        for i, chunk in enumerate(chunks)
    ]
    if draw(st.booleans()) and chunks:
        messages.pop()  # an app that never completes its answer
    return messages, draw(st.sampled_from(["GET", "HEAD", "POST"])), draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(_answers())
def test_single_write_sends_exactly_the_plain_paths_bytes(
    answer: tuple[list[dict[str, Any]], str, bool],
) -> None:
    messages, method, keep_alive = answer
    plain, plain_error, plain_done = _run(messages, method, keep_alive, single=False)
    single, single_error, single_done = _run(messages, method, keep_alive, single=True)
    assert b"".join(single.writes) == b"".join(plain.writes)
    assert (single_error, single_done, single.closed) == (plain_error, plain_done, plain.closed)
    # One write fewer whenever the plain path wrote a head and then small body bytes.
    if len(plain.writes) >= 2 and len(plain.writes[1]) <= SINGLE_WRITE_MAX_BODY_BYTES:
        assert len(single.writes) == len(plain.writes) - 1
        assert single.writes[0] == plain.writes[0] + plain.writes[1]
    else:
        assert single.writes == plain.writes


def test_head_and_small_body_leave_in_one_write() -> None:
    body = b'{"ok":true}'
    messages: list[dict[str, Any]] = [
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        },
        {"type": "http.response.body", "body": body},
    ]
    single, error, done = _run(messages, "GET", True, single=True)
    assert error is None and done
    assert single.writes == [b"HTTP/1.1 200 OK\r\nserver: t\r\ncontent-length: 11\r\n\r\n" + body]


def test_a_cycle_is_freed_without_the_garbage_collector() -> None:
    # The cycle holds HeadWithBody as its transport; HeadWithBody must not hold the cycle
    # after the head, or every request would leave a reference cycle behind.
    messages: list[dict[str, Any]] = [
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]},
        {"type": "http.response.body", "body": b"ok"},
    ]
    cycle = _cycle(RecordingTransport(), "GET", True)

    async def go(c: RequestResponseCycle) -> None:
        await single_write(_app(messages), c)(c.scope, c.receive, c.send)

    asyncio.run(go(cycle))
    assert cycle.response_complete
    freed = weakref.ref(cycle)
    gc.disable()
    try:
        del cycle
        assert freed() is None
    finally:
        gc.enable()


# Stock uvicorn and Logbus's protocols, over real sockets: the same bytes.


async def _wire_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    while (await receive()).get("more_body"):
        pass
    if path == "/small":
        body = b'{"records":[]}'
        headers = [(b"content-type", b"application/json"), (b"content-length", b"14")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif path == "/big":
        body = bytes(range(256)) * 1000
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"a", b"", b"bc" * 100):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    elif path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
    else:
        raise RuntimeError("no response at all: the server answers 500")


REQUESTS = (
    b"GET /small HTTP/1.1\r\nhost: t\r\n\r\n"
    b"HEAD /small HTTP/1.1\r\nhost: t\r\n\r\n"
    b"POST /big HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\n\r\nabc"
    b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n"
    b"GET /empty HTTP/1.1\r\nhost: t\r\n\r\n"
    b"GET /fails HTTP/1.1\r\nhost: t\r\n\r\n"
    b"GET /small HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n"
)


def _serve(protocol: Any, loop: str) -> Iterator[int]:
    config = uvicorn.Config(
        _wire_app,
        host="127.0.0.1",
        port=0,
        http=protocol,
        loop=loop,
        lifespan="off",
        log_level="critical",
        server_header=False,
        date_header=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _exchange(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(REQUESTS)
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
    return bytes(received)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_logbus_protocols_answer_byte_for_byte_as_stock_uvicorn(loop: str) -> None:
    answers = []
    for protocol in ("httptools", PlainHttpToolsProtocol, ZeroCopyHttpToolsProtocol):
        for port in _serve(protocol, loop):
            answers.append(_exchange(port))
    # Every pipelined request answered, up to the 500 (which closes the connection).
    assert answers[0].count(b"HTTP/1.1 ") == 6
    assert answers[0].endswith(b"\r\n\r\nInternal Server Error")
    assert answers[1] == answers[0]
    assert answers[2] == answers[0]
