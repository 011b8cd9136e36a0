"""What authentication + authorization cost on produce and fetch, as ratios to anonymous.

``python -m bench.security`` prints JSON. Two ``logbus serve`` processes in the same run
over fresh data dirs: one with default settings (anonymous), one with
``authentication=basic,jwt`` and ``authorizer=acl`` where ``User:alice`` holds exactly
WRITE and READ on the topic. ``wrk`` (keep-alive, 2 threads, ``CONNECTIONS``
connections) drives each case for ``seconds``; rounds alternate anonymous, Basic and
Bearer so machine noise hits all three alike, and the figure is the median over
``rounds``:

* ``produce_1``: ``POST /topics/sec/records`` with one JSON record, ``acks=1``;
* ``fetch_json``: ``GET`` a JSON fetch of ~20 records;
* ``fetch_binary``: the same offsets as RecordBatch bytes (``Accept:
  application/octet-stream``, the zero-copy path).

``ratio`` is requests/s with credentials over anonymous requests/s in the same run.
:func:`door_cost` measures the door alone in-process (microseconds per request).
Credentials are checked once (scrypt for Basic, RSA for the JWT) and then come from the
authenticators' caches, as they do for any client that keeps its credentials.
"""

from __future__ import annotations

import base64
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import broker_process
from bench.http_edge import _wrk

CONNECTIONS = 64
TOPIC = "sec"
ALICE = ("alice", "alice-secret-1")
ADMIN = ("admin", "admin-secret-1")


def _lua(path: Path, method: str, body: str | None, headers: dict[str, str]) -> Path:
    script = [f'wrk.method = "{method}"']
    if body is not None:
        script.append(f"wrk.body = {json.dumps(body)}")
        headers = {**headers, "Content-Type": "application/json"}
    script += [f'wrk.headers["{k}"] = {json.dumps(v)}' for k, v in headers.items()]
    path.write_text("\n".join(script) + "\n")
    return path


def _prepare(url: str, auth: tuple[str, str] | None) -> None:
    with httpx.Client(base_url=url, timeout=30, auth=auth) as client:
        client.post("/topics", json={"name": TOPIC, "partitions": 1}).raise_for_status()
        if auth is not None:
            acls = [
                {
                    "resource_type": "TOPIC",
                    "resource_name": TOPIC,
                    "principal": "User:alice",
                    "operation": op,
                }
                for op in ("WRITE", "READ")
            ]
            client.post("/acls", json={"acls": acls}).raise_for_status()
        records = {"records": [{"key": f"k{i}", "value": {"n": i}} for i in range(20)]}
        for _ in range(5):
            client.post(f"/topics/{TOPIC}/records", json=records).raise_for_status()


def run(seconds: int = 5, rounds: int = 3) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is missing: apt-get install wrk (make bench does)")
    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    from app.core.security.users import UsersFile

    work = Path(tempfile.mkdtemp(prefix="logbus-sec-"))
    try:
        users = UsersFile(work / "users.json")
        for name, pw in (ADMIN, ALICE):
            users.add(name, pw)
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        jwk.update(kid="k1")
        (work / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
        token = jwt.encode(
            {"sub": "alice", "aud": "logbus", "exp": int(time.time()) + 3600},
            key,
            algorithm="RS256",
            headers={"kid": "k1"},
        )
        secured_env = {
            "LOGBUS_AUTHENTICATION": "basic,jwt",
            "LOGBUS_AUTHORIZER": "acl",
            "LOGBUS_SUPER_USERS": "User:admin",
            "LOGBUS_USERS_FILE": str(work / "users.json"),
            "LOGBUS_JWT_JWKS_FILE": str(work / "jwks.json"),
            "LOGBUS_JWT_AUDIENCE": "logbus",
        }
        basic = "Basic " + base64.b64encode(":".join(ALICE).encode()).decode()
        modes = {
            "anonymous": {},
            "basic": {"Authorization": basic},
            "bearer": {"Authorization": f"Bearer {token}"},
        }
        body = json.dumps({"records": [{"key": "user-1", "value": {"page": "/cart"}}]})
        samples: dict[str, dict[str, list[float]]] = {}
        with broker_process() as (open_url, _), broker_process(secured_env) as (sec_url, _):
            _prepare(open_url, None)
            _prepare(sec_url, ADMIN)
            fetch = f"/topics/{TOPIC}/partitions/0/records?offset=40&max_bytes=2048"
            for _ in range(rounds):
                for mode, headers in modes.items():
                    base = open_url if mode == "anonymous" else sec_url
                    cases = {
                        "produce_1": (f"/topics/{TOPIC}/records?acks=1", "POST", body, {}),
                        "fetch_json": (fetch, "GET", None, {}),
                        "fetch_binary": (
                            fetch,
                            "GET",
                            None,
                            {"Accept": "application/octet-stream"},
                        ),
                    }
                    for case, (path, method, payload, extra) in cases.items():
                        script = _lua(
                            work / f"{case}-{mode}.lua", method, payload, {**headers, **extra}
                        )
                        figure = _wrk(base + path, script, CONNECTIONS, seconds)
                        assert figure["non_2xx"] == 0, (case, mode, figure)
                        samples.setdefault(case, {}).setdefault(mode, []).append(
                            figure["requests_per_s"]
                        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results: dict[str, Any] = {"seconds": seconds, "rounds": rounds, "connections": CONNECTIONS}
    for case, by_mode in samples.items():
        anon = statistics.median(by_mode["anonymous"])
        results[case] = {
            mode: {
                "requests_per_s": round(statistics.median(values)),
                "ratio": round(statistics.median(values) / anon, 3),
                "runs": values,
            }
            for mode, values in by_mode.items()
        }
    return results


def door_cost(n: int = 20_000) -> dict[str, float]:
    """Microseconds per request the door itself costs, in-process: ``SecurityMiddleware``
    over a no-op app, cached Basic credentials, cached decisions (median of 5 loops)."""
    import asyncio

    from app.api import create_app
    from app.api.security import SecurityMiddleware, build
    from app.config import Settings
    from app.core.security.acl import (
        AclBinding,
        AclSnapshot,
        Operation,
        PatternType,
        Permission,
        ResourceType,
    )
    from app.core.security.users import UsersFile

    work = Path(tempfile.mkdtemp(prefix="logbus-door-"))
    try:
        UsersFile(work / "users.json").add(*ALICE, n=2**10)
        settings = Settings(
            data_dir=work, authentication="basic", authorizer="acl", users_file=work / "users.json"
        )
        app = create_app(settings)
        security = build(settings)
        assert security is not None and security.authorizer is not None
        security.authorizer.update(
            AclSnapshot(
                frozenset(
                    AclBinding(
                        ResourceType.TOPIC,
                        TOPIC,
                        PatternType.LITERAL,
                        "User:alice",
                        "*",
                        op,
                        Permission.ALLOW,
                    )
                    for op in (Operation.WRITE, Operation.READ)
                )
            )
        )

        async def nothing(scope: Any, receive: Any, send: Any) -> None:
            return None

        door = SecurityMiddleware(
            nothing, security, app.openapi, lambda b, c: False, lambda t: True
        )
        auth = ("Basic " + base64.b64encode(":".join(ALICE).encode()).decode()).encode()
        produce = {
            "type": "http", "method": "POST", "path": f"/topics/{TOPIC}/records",
            "query_string": b"acks=1", "client": ("127.0.0.1", 1),
            "headers": [(b"content-type", b"application/json"), (b"authorization", auth)],
        }  # fmt: skip
        fetch = dict(
            produce,
            method="GET",
            path=f"/topics/{TOPIC}/partitions/0/records",
            query_string=b"offset=40&max_bytes=2048",
        )

        async def loop(scope: dict[str, Any]) -> float:
            for _ in range(100):
                await door(dict(scope), None, None)  # type: ignore[arg-type]
            start = time.perf_counter()
            for _ in range(n):
                await door(dict(scope), None, None)  # type: ignore[arg-type]
            return (time.perf_counter() - start) / n * 1e6

        return {
            name: round(statistics.median(asyncio.run(loop(scope)) for _ in range(5)), 1)
            for name, scope in (("produce_us", produce), ("fetch_us", fetch))
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps({"door": door_cost(), **run()}, indent=2))
