"""Small HTTP requests at the edge: what many concurrent one-event-per-request clients see.

``python -m bench.http_edge`` prints the figures as JSON; ``run()`` returns them. One
``logbus serve`` with default settings, loaded by ``wrk`` (Debian's package; ``make
bench`` installs it) on keep-alive connections, 2 threads, at 8 and at 64 connections;
each figure is the median of ``rounds`` runs of ``seconds``, the figures taken in turn
within each round:

* ``healthz``: ``GET /healthz``, the framework's own floor and this section's baseline;
* ``produce_1_keyed`` / ``produce_1_unkeyed``: ``POST /topics/edge/records`` with one JSON
  record (a key, or none), ``acks=1``;
* ``produce_10`` / ``produce_100``: the same with 10 and 100 keyed records per request;
* ``fetch_small``: ``GET`` a JSON fetch of about 20 records;
* ``ws_produce_1_keyed``: ``WS /ws/produce``, one keyed record per message, each
  connection sending its next message when the previous one is acknowledged. wrk
  speaks no WebSocket, so this client is Python (``websockets``, one process): it
  shares the cores with the broker and costs about as much per message, so the
  figure is a floor of what the broker can take.

Each figure is requests (messages) per second with the latency p50 and p99 (ms) and
``broker_cpu_us_per_request`` (the broker process's CPU time over the requests answered:
steadier than requests/s on a loaded machine); ``ratio_to_healthz`` is the median over
the rounds of each run's requests/s over the same round's ``/healthz``. The broker,
wrk and the Lua request scripts share this machine's cores, as a user's laptop run
would. ``group_commit_off_c64``: ``healthz`` and ``produce_1_keyed`` at 64
connections against a second broker with ``LOGBUS_GROUP_COMMIT_INLINE=false`` (each
small request appended alone; the default joins them), with
``appends_per_request``: its group-commit appends per produce request over the figure
(``logbus_group_commit_*`` in ``/metrics``).

``python -m bench.http_edge --profile NAME [--out FILE.svg]`` profiles instead: one
broker under ``wrk`` with figure NAME's requests at 64 connections while ``py-spy``
(a bench dependency) samples it; the flame graph is written to FILE.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson
from websockets.asyncio.client import connect

from bench.common import broker_process

CONNECTIONS = (8, 64)
TOPIC = "edge"


def _records(n: int, keyed: bool = True) -> str:
    body = {
        "records": [
            ({"key": f"user-{i}"} if keyed else {}) | {"value": {"page": "/cart", "n": i}}
            for i in range(n)
        ]
    }
    return json.dumps(body)


def _lua(path: Path, method: str, body: str | None) -> Path:
    script = [f'wrk.method = "{method}"']
    if body is not None:
        script += [
            f"wrk.body = {json.dumps(body)}",
            'wrk.headers["Content-Type"] = "application/json"',
        ]
    path.write_text("\n".join(script) + "\n")
    return path


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return round(float(number) * _UNITS[unit], 3)


def _wrk(url: str, script: Path, connections: int, seconds: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            "wrk",
            "-t2",
            f"-c{connections}",
            f"-d{seconds}s",
            "--latency",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    latency = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, flags=re.M))
    if len(latency) != 2:
        raise RuntimeError(f"wrk gave no latency distribution for {url}:\n{out}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "requests_per_s": round(float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))),  # type: ignore[union-attr]
        "p50_ms": _ms(latency["50"]),
        "p99_ms": _ms(latency["99"]),
        "non_2xx": int(errors.group(1)) if errors else 0,
    }


async def _ws_produce_async(url: str, connections: int, seconds: int) -> dict[str, Any]:
    """Closed-loop WebSocket produce: one keyed record per message, on ``connections``
    sockets, for ``seconds`` after a one-second warm-up."""
    ws_url = url.replace("http://", "ws://", 1) + "/ws/produce"
    latencies: list[float] = []
    errors = 0
    loop = asyncio.get_running_loop()
    warm_until = loop.time() + 1.0
    stop_at = warm_until + seconds

    async def one(conn: int) -> None:
        nonlocal errors
        async with connect(ws_url, max_size=None) as ws:
            n = 0
            while True:
                message = orjson.dumps(
                    {
                        "id": n,
                        "topic": TOPIC,
                        "records": [{"key": f"user-{conn}", "value": {"page": "/cart", "n": n}}],
                    }
                ).decode()
                sent = loop.time()
                if sent >= stop_at:
                    return
                await ws.send(message)
                answer = orjson.loads(await ws.recv())
                if sent >= warm_until:
                    latencies.append(loop.time() - sent)
                    if answer.get("type") != "ack":
                        errors += 1
                n += 1

    await asyncio.gather(*(one(c) for c in range(connections)))
    latencies.sort()
    return {
        "requests_per_s": round(len(latencies) / seconds),
        "p50_ms": round(statistics.median(latencies) * 1000, 3),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 3),
        "non_2xx": errors,
    }


def _ws_produce(url: str, connections: int, seconds: int) -> dict[str, Any]:
    return asyncio.run(_ws_produce_async(url, connections, seconds))


def _group_commit(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics").text
    found = [
        float(re.search(rf"^logbus_group_commit_{name}_total (\S+)$", text, flags=re.M).group(1))  # type: ignore[union-attr]
        for name in ("requests", "appends")
    ]
    return found[0], found[1]


def _cases(url: str, scripts: Path) -> dict[str, tuple[str, Path]]:
    """Each wrk figure's target URL and request script."""
    produce = f"{url}/topics/{TOPIC}/records?acks=1"
    return {
        "healthz": (f"{url}/healthz", _lua(scripts / "get.lua", "GET", None)),
        "produce_1_keyed": (produce, _lua(scripts / "p1k.lua", "POST", _records(1))),
        "produce_1_unkeyed": (
            produce,
            _lua(scripts / "p1u.lua", "POST", _records(1, keyed=False)),
        ),
        "produce_10": (produce, _lua(scripts / "p10.lua", "POST", _records(10))),
        "produce_100": (produce, _lua(scripts / "p100.lua", "POST", _records(100))),
        "fetch_small": (
            f"{url}/topics/{TOPIC}/partitions/0/records?offset=60&max_bytes=2048",
            _lua(scripts / "fetch.lua", "GET", None),
        ),
    }


def _prepare(url: str) -> None:
    """The topic every figure uses, with 100 records to fetch from partition 0."""
    with httpx.Client(base_url=url, timeout=30) as client:
        client.post("/topics", json={"name": TOPIC, "partitions": 4}).raise_for_status()
        for _ in range(10):
            client.post(
                f"/topics/{TOPIC}/partitions/0/records",
                content=_records(10),
                headers={"content-type": "application/json"},
            ).raise_for_status()


def profile(name: str, out: Path, seconds: int = 10) -> dict[str, Any]:
    """``py-spy record`` of one broker while wrk loads it with figure ``name`` at 64
    connections; the flame graph goes to ``out``. Returns the wrk figure."""
    scripts = Path(tempfile.mkdtemp(prefix="logbus-edge-"))
    try:
        with broker_process() as (url, pid):
            _prepare(url)
            target, script = _cases(url, scripts)[name]
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("py-spy")),
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    str(seconds),
                    "--rate",
                    "200",
                    "--nonblocking",
                    "-o",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
            )
            figure = _wrk(target, script, 64, seconds + 2)
            spy.wait(timeout=seconds + 60)
    finally:
        shutil.rmtree(scripts, ignore_errors=True)
    return figure


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(
    url: str, pid: int, target: str, script: Path, connections: int, seconds: int
) -> dict[str, Any]:
    """One wrk figure, with the broker's CPU per request and its group-commit appends
    per produce request (when it group-committed any)."""
    before, cpu = _group_commit(url), _cpu_seconds(pid)
    figure = _wrk(target, script, connections, seconds)
    used, after = _cpu_seconds(pid) - cpu, _group_commit(url)
    figure["broker_cpu_us_per_request"] = round(
        used / max(1, figure["requests_per_s"] * seconds) * 1e6, 1
    )
    if after[0] > before[0]:
        figure["appends_per_request"] = round((after[1] - before[1]) / (after[0] - before[0]), 3)
    return figure


def _median_figure(samples: list[dict[str, Any]], ratios: list[float]) -> dict[str, Any]:
    """The median of each measure over the rounds; the ratio is the median of each
    round's ratio to that round's /healthz (pairs measured back to back)."""
    figure: dict[str, Any] = {
        key: statistics.median(s[key] for s in samples)
        for key in samples[0]
        if all(key in s for s in samples)
    }
    figure["requests_per_s"] = round(figure["requests_per_s"])
    figure["runs_requests_per_s"] = [s["requests_per_s"] for s in samples]
    figure["ratio_to_healthz"] = round(statistics.median(ratios), 2)
    return figure


def _rounds(
    url: str,
    pid: int,
    cases: dict[str, tuple[str, Path]],
    connections: int,
    seconds: int,
    rounds: int,
) -> dict[str, Any]:
    """Every case once per round, /healthz first in each: medians over the rounds."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in cases}
    ratios: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (target, script) in cases.items():
            samples[name].append(_measure(url, pid, target, script, connections, seconds))
        floor = samples["healthz"][-1]["requests_per_s"]
        for name in cases:
            ratios[name].append(samples[name][-1]["requests_per_s"] / floor)
    return {name: _median_figure(samples[name], ratios[name]) for name in cases}


def run(seconds: int = 5, rounds: int = 3) -> dict[str, Any]:
    """Each figure is the median of ``rounds`` runs of ``seconds``, the cases taken in
    turn (a loaded machine's slow minute hits every case, not one)."""
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is missing: apt-get install wrk (make bench does)")
    scripts = Path(tempfile.mkdtemp(prefix="logbus-edge-"))
    results: dict[str, Any] = {"seconds": seconds, "rounds": rounds}
    try:
        with broker_process() as (url, pid):
            _prepare(url)
            cases = _cases(url, scripts)
            for connections in CONNECTIONS:
                at = _rounds(url, pid, cases, connections, seconds, rounds)
                ws = _ws_produce(url, connections, seconds * rounds)
                ws["ratio_to_healthz"] = round(
                    ws["requests_per_s"] / at["healthz"]["requests_per_s"], 2
                )
                at["ws_produce_1_keyed"] = ws
                results[f"c{connections}"] = at
        # The same keyed one-record load at 64 connections against a broker that
        # group-commits small requests too (LOGBUS_GROUP_COMMIT_INLINE), with its own
        # /healthz: what joining the requests costs and saves.
        with broker_process({"LOGBUS_GROUP_COMMIT_INLINE": "false"}) as (url, pid):
            with httpx.Client(base_url=url, timeout=30) as client:
                client.post("/topics", json={"name": TOPIC, "partitions": 4}).raise_for_status()
            joined = {
                name: (url + target[target.index("/", len("http://")) :], script)
                for name, (target, script) in cases.items()
                if name in ("healthz", "produce_1_keyed")
            }
            results["group_commit_off_c64"] = _rounds(url, pid, joined, 64, seconds, rounds)
    finally:
        shutil.rmtree(scripts, ignore_errors=True)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", metavar="NAME", help="profile figure NAME instead")
    parser.add_argument("--out", type=Path, default=Path("http_edge.svg"))
    args = parser.parse_args()
    if args.profile:
        print(json.dumps(profile(args.profile, args.out), indent=2))
        print(f"flame graph: {args.out}")
    else:
        print(json.dumps(run(), indent=2))
