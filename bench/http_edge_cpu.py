"""The broker's own CPU per small HTTP request, measured in process: steadier than wrk's
requests/s on a loaded machine.

``python -m bench.http_edge_cpu [CASES]`` (run from the tree to measure: it imports
``app`` from the current directory, so two trees can be compared by running it in
each, alternately). The served stack is the real one: ``build_config``'s protocol
class (the listener's limits, single write, the idle timer) and ``create_app``'s app
with its lifespan, on uvloop, with a data directory of its own; only the sockets are
replaced by in-memory transports, so the figures exclude the kernel's send and receive
(which ``/healthz`` pays like every request). ``CONNECTIONS`` connections each get the
same request at once, then the loop runs until every one is answered (so requests of
one round arrive in one loop turn, as requests read together from busy sockets do, and
group commit joins them); ``ROUNDS`` rounds, timed with ``time.process_time``, best of
``REPS`` (env ``REPS``, default 5). Cases (``bench/http_edge.py``'s bodies):
``healthz``, ``p1k`` (one keyed record), ``p10``, ``p100`` (keyed records spread over
the topic's 4 partitions), ``fetch`` (a JSON fetch of ~40 records). Prints
``{case: us per request}`` as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.getcwd())

CONNECTIONS = 8
ROUNDS = 200


class _Transport(asyncio.Transport):
    """A socket that takes everything: counts the writes, keeps the last."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.last = b""

    def write(self, data: Any) -> None:
        self.writes += 1
        self.last = bytes(data)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def _request(method: str, path: str, body: str | None = None) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\n"
    if body is None:
        return (head + "\r\n").encode()
    data = body.encode()
    return (
        head + f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    ).encode() + data


async def _main(names: list[str], reps: int) -> dict[str, float]:
    from uvicorn.lifespan.on import LifespanOn
    from uvicorn.server import ServerState

    from app.api.server import build_config, settle_collector
    from app.config import Settings
    from bench.http_edge import _records

    cases = {
        "healthz": _request("GET", "/healthz"),
        "p1k": _request("POST", "/topics/edge/records?acks=1", _records(1)),
        "p10": _request("POST", "/topics/edge/records?acks=1", _records(10)),
        "p100": _request("POST", "/topics/edge/records?acks=1", _records(100)),
        "fetch": _request("GET", "/topics/edge/partitions/0/records?offset=60&max_bytes=2048"),
    }
    settings = Settings(data_dir=tempfile.mkdtemp(prefix="logbus-edge-cpu-"))
    config = build_config(settings, access_log=False, log_level="warning")
    config.load()
    lifespan = LifespanOn(config)
    await lifespan.startup()
    loop = asyncio.get_running_loop()
    state = ServerState()
    conns = []
    for _ in range(CONNECTIONS):
        protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=state, app_state=lifespan.state, _loop=loop
        )
        transport = _Transport()
        protocol.connection_made(transport)
        conns.append((protocol, transport))

    async def rounds(data: bytes, n: int) -> bytes:
        for _ in range(n):
            before = [t.writes for _, t in conns]
            for protocol, _ in conns:
                protocol.data_received(data)
            while any(t.writes == w for (_, t), w in zip(conns, before, strict=True)):
                await asyncio.sleep(0)
        return conns[0][1].last

    await rounds(_request("POST", "/topics", json.dumps({"name": "edge", "partitions": 4})), 1)
    for _ in range(10):  # 100 records in partition 0 to fetch
        await rounds(_request("POST", "/topics/edge/partitions/0/records", _records(10)), 1)
    settle_collector(settings.gc_young_threshold)
    out: dict[str, float] = {}
    for name in names:
        answer = await rounds(cases[name], 20)
        if b" 200 " not in answer.split(b"\r\n", 1)[0]:
            raise RuntimeError(f"{name}: {answer[:300]!r}")
        best = []
        for _ in range(reps):
            start = time.process_time()
            await rounds(cases[name], ROUNDS)
            best.append((time.process_time() - start) / (ROUNDS * CONNECTIONS) * 1e6)
        out[name] = round(min(best), 1)
    await lifespan.shutdown()
    return out


if __name__ == "__main__":
    import uvloop

    wanted = (
        sys.argv[1].split(",") if len(sys.argv) > 1 else ["healthz", "p1k", "p10", "p100", "fetch"]
    )
    print(json.dumps(uvloop.run(_main(wanted, int(os.environ.get("REPS", "5"))))))
