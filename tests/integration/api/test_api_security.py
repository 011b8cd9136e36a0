"""Every operation of openapi/openapi.json, and the WebSocket messages, under authentication
and Kafka ACLs: no credentials, bad credentials, an expired or wrongly signed JWT, a
principal without the ACL, one with exactly the ACLs Kafka's equivalent API needs, and a
super user answer 401 / 401 / 401 / 403 / 2xx / 2xx, and nothing changes after a refusal.

The list of operations comes from the spec: an endpoint added without a case here (and a
rule in app/api/security.py) fails ``test_every_operation_has_a_case``.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
from api_helpers import make_settings
from cryptography.hazmat.primitives.asymmetric import rsa
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.api import create_app
from app.api.acl_rules import RULES
from app.common.batch import build_batch
from app.core.security.users import UsersFile

SPEC = json.loads((Path(__file__).resolve().parents[3] / "openapi" / "openapi.json").read_text())
ISSUER, AUDIENCE = "https://issuer.test", "logbus"
PUBLIC = {"healthz", "readyz"}
# Listings answer 200 to anyone authenticated, filtered to what they may DESCRIBE.
LISTINGS = {"listTopics", "listGroups", "getMetadata", "listTransactions"}


def spec_operations() -> set[str]:
    return {op["operationId"] for item in SPEC["paths"].values() for op in item.values()}


@dataclass
class Keys:
    private: Any
    other: Any  # signs the "wrongly signed" token

    def token(self, sub: str, exp_in: float = 300, key: Any = None) -> str:
        claims = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time() + exp_in)}
        return jwt.encode(claims, key or self.private, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys(
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
        rsa.generate_private_key(public_exponent=65537, key_size=2048),
    )


def _basic(name: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode()}


@pytest.fixture
def secured(tmp_path: Path, keys: Keys) -> Iterator[TestClient]:
    jwks = jwt.algorithms.RSAAlgorithm.to_jwk(keys.private.public_key(), as_dict=True)
    jwks.update(kid="k1", use="sig", alg="RS256")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwks]}))
    users = UsersFile(tmp_path / "users.json")
    for name in ("alice", "mallory"):
        users.add(name, f"{name}-secret", n=2**10)  # a cheap cost: tests, not storage
    settings = make_settings(
        tmp_path,
        authentication="basic,jwt",
        authorizer="acl",
        super_users="User:root",
        users_file=tmp_path / "users.json",
        jwt_jwks_file=tmp_path / "jwks.json",
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@dataclass
class Who:
    root: dict[str, str]
    alice: dict[str, str]
    mallory: dict[str, str]
    refused: dict[str, dict[str, str]] = field(default_factory=dict)


@pytest.fixture
def who(keys: Keys) -> Who:
    return Who(
        root={"Authorization": f"Bearer {keys.token('root')}"},
        alice=_basic("alice", "alice-secret"),
        mallory=_basic("mallory", "mallory-secret"),
        refused={
            "none": {},
            "bad password": _basic("alice", "wrong"),
            "expired jwt": {"Authorization": f"Bearer {keys.token('alice', exp_in=-3600)}"},
            "wrongly signed jwt": {
                "Authorization": f"Bearer {keys.token('alice', key=keys.other)}"
            },
        },
    )


def acl(rtype: str, name: str, op: str, principal: str = "User:alice") -> dict[str, str]:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "pattern_type": "LITERAL",
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission": "ALLOW",
    }


@dataclass
class Case:
    """A request that succeeds with ``acls``; ``setup`` prepares it for one caller (as root)."""

    method: str
    path: Callable[[str], str]
    acls: Callable[[str], list[dict[str, str]]]
    json: Callable[[str], Any] | None = None
    content: bytes | None = None
    setup: Callable[[TestClient, Who, str], None] | None = None


def _topic(c: TestClient, w: Who, name: str) -> None:
    r = c.post("/topics", json={"name": name}, headers=w.root)
    assert r.status_code == 201, r.text


def _commit(c: TestClient, w: Who, group: str) -> None:
    body = {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]}
    r = c.post(f"/groups/{group}/offsets", json=body, headers=w.root)
    assert r.status_code == 200, r.text


# Transactions: each case (and caller) its own transactional id, initialized by root in
# the setup; the producer id and epoch it got, by transactional id.
PRODUCERS: dict[str, tuple[int, int]] = {}


def _tx(op: str, s: str) -> str:
    return f"tx-{op}-{s}"


def _init_tx(tid: str, *, add: bool = False) -> Callable[[TestClient, Who, str], None]:
    def setup(c: TestClient, w: Who, s: str) -> None:
        name = tid.format(s=s)
        # The longest timeout the broker allows (15 min): a transaction the coordinator
        # aborted on its timer mid-test would write markers between a refused call's
        # before and after, and read as that call's doing.
        body = {"transactional_id": name, "transaction_timeout_ms": 900_000}
        r = c.post("/producers", json=body, headers=w.root)
        assert r.status_code == 200, r.text
        PRODUCERS[name] = (r.json()["producer_id"], r.json()["producer_epoch"])
        if add:
            r = c.post(
                f"/transactions/{name}/partitions",
                json={**_producer(name), "topics": [{"topic": "orders", "partitions": [0]}]},
                headers=w.root,
            )
            assert r.status_code == 200, r.text

    return setup


def _producer(tid: str) -> dict[str, int]:
    pid, epoch = PRODUCERS[tid]
    return {"producer_id": pid, "producer_epoch": epoch}


def _tx_case(
    op: str,
    method: str,
    suffix: str,
    acls: Callable[[str, str], list[dict[str, str]]],
    body: Callable[[str], dict[str, Any]] | None = None,
    *,
    add: bool = False,
    query: bool = False,
    plain: dict[str, Any] | None = None,
) -> Case:
    def path(s: str) -> str:
        tid = _tx(op, s)
        url = f"/transactions/{tid}{suffix}"
        if query:
            pid, epoch = PRODUCERS[tid]
            url += f"?producer_id={pid}&producer_epoch={epoch}"
        return url

    def json(s: str) -> Any:
        if plain is not None:
            return plain
        return None if body is None else {**_producer(_tx(op, s)), **body(s)}

    return Case(
        method,
        path,
        lambda s: acls(_tx(op, s), s),
        json=None if body is None and plain is None else json,
        setup=_init_tx(_tx(op, "{s}"), add=add),
    )


TX = "TRANSACTIONAL_ID"
T = "TOPIC"
CASES: dict[str, Case] = {
    "findCoordinator": Case(
        "POST",
        lambda s: "/coordinator",
        lambda s: [acl("GROUP", "billing", "DESCRIBE")],
        json=lambda s: {"key": "billing"},
    ),
    "listGroups": Case("GET", lambda s: "/groups", lambda s: [acl("GROUP", "billing", "DESCRIBE")]),
    "deleteGroup": Case(
        "DELETE",
        lambda s: f"/groups/gone-{s}",
        lambda s: [acl("GROUP", f"gone-{s}", "DELETE")],
        setup=lambda c, w, s: _commit(c, w, f"gone-{s}"),
    ),
    "describeGroup": Case(
        "GET", lambda s: "/groups/billing", lambda s: [acl("GROUP", "billing", "DESCRIBE")]
    ),
    "heartbeat": Case(
        "POST",
        lambda s: f"/groups/join-{s}/heartbeat",
        lambda s: [acl("GROUP", f"join-{s}", "READ"), acl(T, "orders", "DESCRIBE")],
        json=lambda s: {"member_epoch": 0, "subscribed_topics": ["orders"]},
    ),
    "fetchOffsets": Case(
        "GET", lambda s: "/groups/billing/offsets", lambda s: [acl("GROUP", "billing", "DESCRIBE")]
    ),
    "commitOffsets": Case(
        "POST",
        lambda s: "/groups/billing/offsets",
        lambda s: [acl("GROUP", "billing", "READ"), acl(T, "orders", "READ")],
        json=lambda s: {"offsets": [{"topic": "orders", "partition": 0, "offset": 1}]},
    ),
    "resetOffsets": Case(
        "POST",
        lambda s: "/groups/billing/offsets/reset",
        lambda s: [acl("GROUP", "billing", "READ"), acl(T, "orders", "READ")],
        json=lambda s: {"topic": "orders", "to": "earliest"},
    ),
    "healthz": Case("GET", lambda s: "/healthz", lambda s: []),
    "readyz": Case("GET", lambda s: "/readyz", lambda s: []),
    "getMetadata": Case("GET", lambda s: "/metadata", lambda s: [acl(T, "orders", "DESCRIBE")]),
    "getMetrics": Case(
        "GET", lambda s: "/metrics", lambda s: [acl("CLUSTER", "kafka-cluster", "DESCRIBE")]
    ),
    "initProducerId": Case(
        "POST",
        lambda s: "/producers",
        lambda s: [acl("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")],
        json=lambda s: {},
    ),
    "addPartitionsToTxn": _tx_case(
        "addPartitionsToTxn",
        "POST",
        "/partitions",
        lambda tid, s: [acl(TX, tid, "WRITE"), acl(T, "orders", "WRITE")],
        lambda s: {"topics": [{"topic": "orders", "partitions": [0]}]},
    ),
    "produceTransactional": _tx_case(
        "produceTransactional",
        "POST",
        "/topics/orders/records",
        lambda tid, s: [acl(TX, tid, "WRITE"), acl(T, "orders", "WRITE")],
        query=True,
        plain={"records": [{"value": 1, "partition": 0}]},
    ),
    "addOffsetsToTxn": _tx_case(
        "addOffsetsToTxn",
        "POST",
        "/groups",
        lambda tid, s: [acl(TX, tid, "WRITE"), acl("GROUP", "billing", "READ")],
        lambda s: {"group_id": "billing"},
    ),
    "txnOffsetCommit": _tx_case(
        "txnOffsetCommit",
        "POST",
        "/offsets",
        lambda tid, s: [
            acl(TX, tid, "WRITE"),
            acl("GROUP", "billing", "READ"),
            acl(T, "orders", "READ"),
        ],
        lambda s: {
            "group_id": "billing",
            "offsets": [{"topic": "orders", "partition": 0, "offset": 1}],
        },
    ),
    "commitTransaction": _tx_case(
        "commitTransaction",
        "POST",
        "/commit",
        lambda tid, s: [acl(TX, tid, "WRITE")],
        lambda s: {},
        add=True,
    ),
    "abortTransaction": _tx_case(
        "abortTransaction",
        "POST",
        "/abort",
        lambda tid, s: [acl(TX, tid, "WRITE")],
        lambda s: {},
        add=True,
    ),
    "describeTransaction": _tx_case(
        "describeTransaction", "GET", "", lambda tid, s: [acl(TX, tid, "DESCRIBE")]
    ),
    "listTransactions": Case(
        "GET",
        lambda s: "/transactions",
        lambda s: [acl(TX, "orders-tx", "DESCRIBE")],
        setup=_init_tx("orders-tx"),
    ),
    "writeTxnMarker": Case(
        "POST",
        lambda s: "/topics/orders/partitions/0/markers",
        lambda s: [acl("CLUSTER", "kafka-cluster", "CLUSTER_ACTION")],
        json=lambda s: {
            "producer_id": 77,
            "producer_epoch": 0,
            "commit": False,
            "coordinator_epoch": 0,
        },
    ),
    "listTopics": Case("GET", lambda s: "/topics", lambda s: [acl(T, "orders", "DESCRIBE")]),
    "createTopic": Case(
        "POST",
        lambda s: "/topics",
        lambda s: [acl(T, f"new-{s}", "CREATE")],
        json=lambda s: {"name": f"new-{s}"},
    ),
    "deleteTopic": Case(
        "DELETE",
        lambda s: f"/topics/doomed-{s}",
        lambda s: [acl(T, f"doomed-{s}", "DELETE")],
        setup=lambda c, w, s: _topic(c, w, f"doomed-{s}"),
    ),
    "getTopic": Case("GET", lambda s: "/topics/orders", lambda s: [acl(T, "orders", "DESCRIBE")]),
    "createPartitions": Case(
        "POST",
        lambda s: f"/topics/grown-{s}/partitions",
        lambda s: [acl(T, f"grown-{s}", "ALTER")],
        json=lambda s: {"count": 2},
        setup=lambda c, w, s: _topic(c, w, f"grown-{s}"),
    ),
    "alterTopicConfigs": Case(
        "PUT",
        lambda s: f"/topics/tuned-{s}/configs",
        lambda s: [acl(T, f"tuned-{s}", "ALTER_CONFIGS")],
        json=lambda s: {"configs": {"retention.ms": 60000}},
        setup=lambda c, w, s: _topic(c, w, f"tuned-{s}"),
    ),
    "deleteRecords": Case(
        "DELETE",
        lambda s: f"/topics/trimmed-{s}/partitions/0/records?before=-1",
        lambda s: [acl(T, f"trimmed-{s}", "DELETE")],
        setup=lambda c, w, s: _topic(c, w, f"trimmed-{s}"),
    ),
    "produceBatches": Case(
        "POST",
        lambda s: "/topics/orders/partitions/0/batches",
        lambda s: [acl(T, "orders", "WRITE")],
        content=build_batch([(b"k", b"v")]),
    ),
    "epochEndOffset": Case(
        "GET",
        lambda s: "/topics/orders/partitions/0/epochs/0/end-offset",
        lambda s: [acl(T, "orders", "DESCRIBE")],
    ),
    "listOffsets": Case(
        "GET",
        lambda s: "/topics/orders/partitions/0/offsets?at=latest",
        lambda s: [acl(T, "orders", "DESCRIBE")],
    ),
    "fetchRecords": Case(
        "GET",
        lambda s: "/topics/orders/partitions/0/records?offset=0&max_wait_ms=0",
        lambda s: [acl(T, "orders", "READ")],
    ),
    "produceToPartition": Case(
        "POST",
        lambda s: "/topics/orders/partitions/0/records",
        lambda s: [acl(T, "orders", "WRITE")],
        json=lambda s: {"records": [{"value": 1}]},
    ),
    "produce": Case(
        "POST",
        lambda s: "/topics/orders/records",
        lambda s: [acl(T, "orders", "WRITE")],
        json=lambda s: {"records": [{"value": 1}]},
    ),
    "createAcls": Case(
        "POST",
        lambda s: "/acls",
        lambda s: [acl("CLUSTER", "kafka-cluster", "ALTER")],
        json=lambda s: {"acls": [acl(T, f"x-{s}", "READ", "User:nobody")]},
    ),
    "describeAcls": Case(
        "GET", lambda s: "/acls", lambda s: [acl("CLUSTER", "kafka-cluster", "DESCRIBE")]
    ),
    "deleteAcls": Case(
        "DELETE",
        lambda s: f"/acls?principal=User:nobody&resource_name=x-{s}",
        lambda s: [acl("CLUSTER", "kafka-cluster", "ALTER")],
        setup=lambda c, w, s: _add_acls(c, w, [acl(T, f"x-{s}", "READ", "User:nobody")]),
    ),
    # Kafka's DescribeClientQuotas / AlterClientQuotas: DESCRIBE_CONFIGS / ALTER_CONFIGS.
    "describeQuotas": Case(
        "GET", lambda s: "/quotas", lambda s: [acl("CLUSTER", "kafka-cluster", "DESCRIBE_CONFIGS")]
    ),
    "alterQuotas": Case(
        "POST",
        lambda s: "/quotas",
        lambda s: [acl("CLUSTER", "kafka-cluster", "ALTER_CONFIGS")],
        json=lambda s: {
            "entries": [
                {
                    "entity": [{"entity_type": "user", "entity_name": f"q-{s}"}],
                    "ops": [{"key": "request_rate", "value": 1000}],
                }
            ]
        },
    ),
}


# The schema registry (app/api/acl_rules.py): a subject is its topic's (orders-value ->
# orders); ids, listings and the global reads need only an authenticated principal.
SR = "/schema-registry"
SR_SCHEMA = '{"type":"record","name":"O","fields":[{"name":"a","type":"string"}]}'
# Answered 200 to any authenticated principal (mallory too): nothing of a subject's.
AUTHENTICATED = {
    "listSchemaTypes",
    "listSchemas",
    "getSchemaById",
    "getSchemaTextById",
    "getSchemaSubjects",
    "getSchemaVersions",
    "listSubjects",
    "getGlobalConfig",
    "getGlobalMode",
}


def _sr_put(subject: str, kind: str = "") -> Callable[[TestClient, Who, str], None]:
    """Root registers the schema under ``subject`` (``{s}``: the caller), or sets its
    ``config``/``mode``."""

    def setup(c: TestClient, w: Who, s: str) -> None:
        name = subject.format(s=s)
        if kind == "config":
            r = c.put(f"{SR}/config/{name}", json={"compatibility": "FULL"}, headers=w.root)
        elif kind == "mode":
            r = c.put(f"{SR}/mode/{name}", json={"mode": "READWRITE"}, headers=w.root)
        else:
            r = c.post(f"{SR}/subjects/{name}/versions", json={"schema": SR_SCHEMA}, headers=w.root)
        assert r.status_code == 200, r.text

    return setup


def _sr(
    method: str,
    path: str,
    acls: Callable[[str], list[dict[str, str]]],
    body: Any = None,
    setup: Callable[[TestClient, Who, str], None] | None = None,
) -> Case:
    return Case(
        method,
        lambda s: SR + path.format(s=s),
        acls,
        json=None if body is None else (lambda s: body),
        setup=setup or _sr_put("orders-value"),
    )


def _on_orders(op: str) -> Callable[[str], list[dict[str, str]]]:
    return lambda s: [acl(T, "orders", op)]


_CLUSTER_CONFIGS = lambda s: [acl("CLUSTER", "kafka-cluster", "ALTER_CONFIGS")]  # noqa: E731
_NONE = lambda s: []  # noqa: E731
CASES.update(
    {
        "listSchemaTypes": _sr("GET", "/schemas/types", _NONE),
        "listSchemas": _sr("GET", "/schemas", _NONE),
        "getSchemaById": _sr("GET", "/schemas/ids/1", _NONE),
        "getSchemaTextById": _sr("GET", "/schemas/ids/1/schema", _NONE),
        "getSchemaSubjects": _sr("GET", "/schemas/ids/1/subjects", _NONE),
        "getSchemaVersions": _sr("GET", "/schemas/ids/1/versions", _NONE),
        "listSubjects": _sr("GET", "/subjects", _NONE),
        "getGlobalConfig": _sr("GET", "/config", _NONE),
        "getGlobalMode": _sr("GET", "/mode", _NONE),
        "listSubjectVersions": _sr(
            "GET", "/subjects/orders-value/versions", _on_orders("DESCRIBE")
        ),
        "getSubjectVersion": _sr(
            "GET", "/subjects/orders-value/versions/1", _on_orders("DESCRIBE")
        ),
        "getSubjectVersionSchema": _sr(
            "GET", "/subjects/orders-value/versions/1/schema", _on_orders("DESCRIBE")
        ),
        "getReferencedBy": _sr(
            "GET", "/subjects/orders-value/versions/1/referencedby", _on_orders("DESCRIBE")
        ),
        "registerSchema": _sr(
            "POST", "/subjects/orders-value/versions", _on_orders("WRITE"), {"schema": SR_SCHEMA}
        ),
        "lookupSchema": _sr(
            "POST", "/subjects/orders-value", _on_orders("DESCRIBE"), {"schema": SR_SCHEMA}
        ),
        "checkCompatibility": _sr(
            "POST",
            "/compatibility/subjects/orders-value/versions/latest",
            _on_orders("DESCRIBE"),
            {"schema": SR_SCHEMA},
        ),
        "checkCompatibilityAll": _sr(
            "POST",
            "/compatibility/subjects/orders-value/versions",
            _on_orders("DESCRIBE"),
            {"schema": SR_SCHEMA},
        ),
        "deleteSubject": _sr(
            "DELETE",
            "/subjects/gone-{s}-value",
            lambda s: [acl(T, f"gone-{s}", "ALTER_CONFIGS")],
            setup=_sr_put("gone-{s}-value"),
        ),
        "deleteSubjectVersion": _sr(
            "DELETE",
            "/subjects/vgone-{s}-value/versions/1",
            lambda s: [acl(T, f"vgone-{s}", "ALTER_CONFIGS")],
            setup=_sr_put("vgone-{s}-value"),
        ),
        "setGlobalConfig": _sr("PUT", "/config", _CLUSTER_CONFIGS, {"compatibility": "BACKWARD"}),
        "deleteGlobalConfig": _sr("DELETE", "/config", _CLUSTER_CONFIGS),
        "getSubjectConfig": _sr(
            "GET", "/config/orders-value?defaultToGlobal=true", _on_orders("DESCRIBE")
        ),
        "setSubjectConfig": _sr(
            "PUT", "/config/orders-value", _on_orders("ALTER_CONFIGS"), {"compatibility": "FULL"}
        ),
        "deleteSubjectConfig": _sr(
            "DELETE",
            "/config/cfg-{s}-value",
            lambda s: [acl(T, f"cfg-{s}", "ALTER_CONFIGS")],
            setup=_sr_put("cfg-{s}-value", "config"),
        ),
        "setGlobalMode": _sr("PUT", "/mode", _CLUSTER_CONFIGS, {"mode": "READWRITE"}),
        "getSubjectMode": _sr(
            "GET", "/mode/orders-value?defaultToGlobal=true", _on_orders("DESCRIBE")
        ),
        "setSubjectMode": _sr(
            "PUT", "/mode/orders-value", _on_orders("ALTER_CONFIGS"), {"mode": "READWRITE"}
        ),
        "deleteSubjectMode": _sr(
            "DELETE",
            "/mode/mode-{s}-value",
            lambda s: [acl(T, f"mode-{s}", "ALTER_CONFIGS")],
            setup=_sr_put("mode-{s}-value", "mode"),
        ),
    }
)


def _add_acls(c: TestClient, w: Who, acls: list[dict[str, str]]) -> None:
    if acls:
        r = c.post("/acls", json={"acls": acls}, headers=w.root)
        assert r.status_code == 201, r.text


def _set_alice(c: TestClient, w: Who, acls: list[dict[str, str]]) -> None:
    r = c.delete("/acls?principal=User:alice", headers=w.root)
    assert r.status_code == 200, r.text
    _add_acls(c, w, acls)


def _call(c: TestClient, case: Case, s: str, headers: dict[str, str]) -> Any:
    kwargs: dict[str, Any] = {"headers": dict(headers)}
    if case.json is not None:
        kwargs["json"] = case.json(s)
    if case.content is not None:
        kwargs["content"] = case.content
        kwargs["headers"]["Content-Type"] = "application/octet-stream"
    return c.request(case.method, case.path(s), **kwargs)


def fingerprint(c: TestClient, w: Who) -> Any:
    """What a refused request must not change: topics, their offsets, groups, offsets, ACLs."""
    topics = c.get("/topics", headers=w.root).json()["topics"]
    ends = {
        t["name"]: [
            p["log_end_offset"]
            for p in c.get(f"/topics/{t['name']}", headers=w.root).json()["partitions"]
        ]
        for t in topics
    }
    groups = c.get("/groups", headers=w.root).json()["groups"]
    offsets = {
        g["group"]: c.get(f"/groups/{g['group']}/offsets", headers=w.root).json() for g in groups
    }
    acls = c.get("/acls", headers=w.root).json()
    return topics, ends, groups, offsets, acls


def test_every_operation_has_a_case() -> None:
    assert spec_operations() == set(CASES)
    assert spec_operations() == set(RULES)


@pytest.mark.slow
def test_every_operation_under_security(secured: TestClient, who: Who) -> None:
    c, w = secured, who
    _topic(c, w, "orders")
    _commit(c, w, "billing")
    for op_id, case in sorted(CASES.items()):
        for s in ("a", "r", "m"):
            if case.setup is not None:
                case.setup(c, w, s)
        for label, headers in w.refused.items():
            before = fingerprint(c, w)
            r = _call(c, case, "m", headers)
            if op_id in PUBLIC:
                assert r.status_code == 200, (op_id, label, r.text)
                continue
            assert r.status_code == 401, (op_id, label, r.text)
            assert r.json()["error_code"] == "SASL_AUTHENTICATION_FAILED"
            assert "Basic" in r.headers["www-authenticate"]
            assert "Bearer" in r.headers["www-authenticate"]
            assert fingerprint(c, w) == before, (op_id, label)
        # A principal without the ACL (alice holds exactly what another call needs).
        _set_alice(c, w, case.acls("a"))
        before = fingerprint(c, w)
        r = _call(c, case, "m", w.mallory)
        if op_id in AUTHENTICATED:
            assert r.status_code == 200, (op_id, r.text)
        elif op_id in PUBLIC or op_id in LISTINGS:
            assert r.status_code == 200, (op_id, r.text)
            assert "orders" not in r.text and "billing" not in r.text, (op_id, r.text)
        else:
            assert r.status_code == 403, (op_id, r.text)
            body = r.json()
            assert body["error_code"].endswith("_AUTHORIZATION_FAILED"), body
            assert body["operation"] and body["resource_name"], body
            assert fingerprint(c, w) == before, op_id
        # Exactly the ACLs Kafka's API needs.
        r = _call(c, case, "a", w.alice)
        assert 200 <= r.status_code < 300, (op_id, r.text)
        if op_id in LISTINGS:
            assert ("orders" in r.text) or ("billing" in r.text), (op_id, r.text)
        # A super user.
        _set_alice(c, w, [])
        r = _call(c, case, "r", w.root)
        assert 200 <= r.status_code < 300, (op_id, r.text)


def test_each_acl_is_needed(secured: TestClient, who: Who) -> None:
    """Dropping any one of a case's ACLs refuses it: the cases hold no spare ACL."""
    c, w = secured, who
    _topic(c, w, "orders")
    _commit(c, w, "billing")
    for op_id, case in sorted(CASES.items()):
        needed = case.acls("a")
        if op_id in LISTINGS or op_id in PUBLIC or len(needed) < 2:
            continue
        if case.setup is not None:
            case.setup(c, w, "a")
        for i in range(len(needed)):
            _set_alice(c, w, needed[:i] + needed[i + 1 :])
            r = _call(c, case, "a", w.alice)
            assert r.status_code == 403, (op_id, needed[i], r.text)


def test_internal_topic_is_not_readable(secured: TestClient, who: Who) -> None:
    c, w = secured, who
    _topic(c, w, "orders")
    _commit(c, w, "billing")
    _set_alice(c, w, [acl(T, "*", "ALL")])
    r = c.get("/topics/__consumer_offsets/partitions/0/records?offset=0", headers=w.alice)
    assert r.status_code == 403 and r.json()["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
    r = c.get(
        "/topics/__consumer_offsets/partitions/0/records?offset=0&max_wait_ms=0", headers=w.root
    )
    assert r.status_code == 200


def test_produce_to_a_missing_topic_needs_create(secured: TestClient, who: Who) -> None:
    c, w = secured, who
    _set_alice(c, w, [acl(T, "fresh", "WRITE")])
    r = c.post("/topics/fresh/records", json={"records": [{"value": 1}]}, headers=w.alice)
    assert r.status_code == 403 and r.json()["operation"] == "CREATE"
    assert c.get("/topics/fresh", headers=w.root).status_code == 404
    _set_alice(c, w, [acl(T, "fresh", "WRITE"), acl(T, "fresh", "CREATE")])
    r = c.post("/topics/fresh/records", json={"records": [{"value": 1}]}, headers=w.alice)
    assert r.status_code == 200, r.text


def test_audit_log_names_denials_without_secrets(
    secured: TestClient, who: Who, caplog: pytest.LogCaptureFixture
) -> None:
    c, w = secured, who
    with caplog.at_level(logging.INFO, logger="logbus.audit"):
        c.get("/topics/orders", headers=w.mallory)
        c.get("/topics/orders", headers=_basic("alice", "hunter2"))
        _set_alice(c, w, [acl(T, "orders", "READ")])
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "logbus.audit")
    assert "DENIED principal=User:mallory" in text and "TOPIC:orders" in text
    assert "AUTHENTICATION_FAILED mechanism=basic" in text
    assert "CREATE_ACLS" in text and "DELETE_ACLS" in text
    assert "hunter2" not in text and "mallory-secret" not in text
    assert w.root["Authorization"].split()[1] not in text


# --- WebSocket ------------------------------------------------------------------------


def _ws_produce(
    c: TestClient,
    headers: dict[str, str],
    first: dict[str, Any] | None = None,
    subprotocols: list[str] | None = None,
) -> dict[str, Any]:
    with c.websocket_connect("/ws/produce", headers=headers, subprotocols=subprotocols) as ws:
        if first is not None:
            ws.send_json(first)
        ws.send_json({"type": "produce", "id": 1, "topic": "orders", "records": [{"value": 1}]})
        answer: dict[str, Any] = ws.receive_json()
        return answer


def test_websocket_produce_and_subscribe(secured: TestClient, who: Who, keys: Keys) -> None:
    c, w = secured, who
    _topic(c, w, "orders")

    def end() -> int:
        r = c.get("/topics/orders", headers=w.root)
        return int(r.json()["partitions"][0]["log_end_offset"])

    # Refused handshakes: 401 before anything is accepted.
    for label, headers in w.refused.items():
        if not headers:
            continue
        with pytest.raises(Exception) as info:
            _ws_produce(c, headers)
        assert "401" in repr(info.value) or isinstance(info.value, WebSocketDisconnect), label
    assert end() == 0
    # No credentials in the handshake and a first message that is not auth: closed 4401.
    with pytest.raises(WebSocketDisconnect) as closed:
        _ws_produce(c, {})
    assert closed.value.code == 4401
    assert end() == 0
    # Without the ACL: an error frame, nothing written.
    _set_alice(c, w, [acl(T, "orders", "READ")])
    answer = _ws_produce(c, w.alice)
    assert answer["type"] == "error" and answer["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
    assert end() == 0
    # With WRITE: by header, by first auth message, by subprotocol token; a super user.
    _set_alice(c, w, [acl(T, "orders", "WRITE")])
    assert _ws_produce(c, w.alice)["type"] == "ack"
    auth = {"type": "auth", "username": "alice", "password": "alice-secret"}
    assert _ws_produce(c, {}, first=auth)["type"] == "ack"
    token = keys.token("alice")
    assert _ws_produce(c, {}, subprotocols=["logbus", f"bearer.{token}"])["type"] == "ack"
    assert _ws_produce(c, w.root)["type"] == "ack"
    assert end() == 4
    # Subscribe needs READ.
    sub = {
        "type": "subscribe",
        "topics": ["orders"],
        "start": "earliest",
        "credit": {"records": 10},
    }
    with c.websocket_connect("/ws/subscribe", headers=w.alice) as ws:
        ws.send_json(sub)
        assert ws.receive_json()["error_code"] == "TOPIC_AUTHORIZATION_FAILED"
    _set_alice(c, w, [acl(T, "orders", "READ")])
    with c.websocket_connect("/ws/subscribe", headers=w.alice) as ws:
        ws.send_json(sub)
        assert ws.receive_json()["type"] == "subscribed"
    # A group member also needs READ on the group.
    member = {**sub, "group": "ws-billing", "start": "earliest"}
    with c.websocket_connect("/ws/subscribe", headers=w.alice) as ws:
        ws.send_json(member)
        refused = ws.receive_json()
        assert refused["error_code"] == "GROUP_AUTHORIZATION_FAILED", refused
    assert c.get("/groups/ws-billing", headers=w.root).status_code == 404
    _set_alice(c, w, [acl(T, "orders", "READ"), acl("GROUP", "ws-billing", "READ")])
    with c.websocket_connect("/ws/subscribe", headers=w.alice) as ws:
        ws.send_json(member)
        assert ws.receive_json()["type"] == "subscribed"


def test_idempotent_producer_id_with_write_on_some_topic(secured: TestClient, who: Who) -> None:
    """KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic."""
    c, w = secured, who
    _set_alice(c, w, [acl(T, "orders", "READ")])
    r = c.post("/producers", json={}, headers=w.alice)
    assert r.status_code == 403 and r.json()["operation"] == "IDEMPOTENT_WRITE"
    _set_alice(c, w, [acl(T, "orders", "WRITE")])
    assert c.post("/producers", json={}, headers=w.alice).status_code == 200
    r = c.post("/producers", json={"transactional_id": "tx-1"}, headers=w.alice)
    assert (
        r.status_code == 403 and r.json()["error_code"] == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    )


def test_websocket_closes_when_its_token_expires(tmp_path: Path, keys: Keys, who: Who) -> None:
    jwk = jwt.algorithms.RSAAlgorithm.to_jwk(keys.private.public_key(), as_dict=True)
    jwk.update(kid="k1")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    settings = make_settings(
        tmp_path,
        authentication="jwt",
        jwt_jwks_file=tmp_path / "jwks.json",
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
        jwt_clock_skew_s=0,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        # exp is whole seconds: 2 s left as little as 1, which a loaded host spent opening
        # the socket (the first frame was the close); 4 leaves the ping at least 3.
        token = keys.token("alice", exp_in=4)
        headers = {"Authorization": f"Bearer {token}"}
        with c.websocket_connect("/ws/produce", headers=headers) as ws:
            ws.send_json({"type": "ping", "id": 1})
            assert ws.receive_json()["type"] == "pong"
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_json()  # nothing more is sent: the expiry closes the socket
            assert closed.value.code == 4401


def test_a_forged_broker_credential_is_no_credential(secured: TestClient, who: Who) -> None:
    forged = {"Logbus-Replica-Id": "1", "Logbus-Replica-Auth": "00" * 32}
    r = secured.get("/topics/orders/partitions/0/records?offset=0&replica_id=1", headers=forged)
    assert r.status_code == 401
    # With a user's credentials the forged claim still earns nothing beyond the user's ACLs.
    r = secured.get("/topics", headers={**forged, **who.mallory})
    assert r.status_code == 200 and r.json()["topics"] == []


def test_topic_configs_need_describe_configs(secured: TestClient, who: Who) -> None:
    c, w = secured, who
    _topic(c, w, "orders")
    _set_alice(c, w, [acl(T, "orders", "DESCRIBE")])
    described = c.get("/topics/orders", headers=w.alice).json()
    assert described["configs"] == {} and described["partitions"]
    _set_alice(c, w, [acl(T, "orders", "DESCRIBE"), acl(T, "orders", "ALTER_CONFIGS")])
    assert "retention.ms" in c.get("/topics/orders", headers=w.alice).json()["configs"]


def test_a_regex_subscription_matches_only_topics_the_member_may_describe(
    secured: TestClient, who: Who
) -> None:
    """Kafka filters metadata by DESCRIBE: a pattern subscription resolves to the matching
    topics the member's principal may DESCRIBE, and follows a new ACL at its next
    heartbeat. A super user's pattern matches all."""
    c = secured
    for name in ("pay-a", "pay-b", "pay-secret", "other"):
        _topic(c, who, name)
    _set_alice(c, who, [acl("GROUP", "rx", "READ"), acl(T, "pay-a", "DESCRIBE"),
                        acl(T, "pay-b", "READ"), acl(T, "other", "DESCRIBE")])  # fmt: skip

    def beat(headers: dict[str, str], group: str, body: dict[str, Any]) -> dict[str, Any]:
        r = c.post(f"/groups/{group}/heartbeat", json=body, headers=headers)
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    def topics_of(answer: dict[str, Any]) -> set[str]:
        return {tp["topic"] for tp in answer["assignment"]["partitions"]}

    join = {"member_id": "", "member_epoch": 0, "subscribed_topic_regex": "pay-.*"}
    first = beat(who.alice, "rx", join)
    assert topics_of(first) == {"pay-a", "pay-b"}
    described = c.get("/groups/rx", headers=who.root).json()
    assert described["members"][0]["subscribed_topic_regex"] == "pay-.*"
    _add_acls(c, who, [acl(T, "pay-", "DESCRIBE") | {"pattern_type": "PREFIXED"}])
    again = {"member_id": first["member_id"], "member_epoch": first["member_epoch"]}
    assert topics_of(beat(who.alice, "rx", again)) == {"pay-a", "pay-b", "pay-secret"}
    assert topics_of(beat(who.root, "rx-root", join)) == {"pay-a", "pay-b", "pay-secret"}


def test_delete_acls_takes_several_kafka_filters_in_one_call(secured: TestClient, who: Who) -> None:
    """Kafka's DeleteAcls: several AclBindingFilters in one call, per-filter results, and
    the MATCH / ANY pattern types as AclBindingFilter has them."""
    c = secured
    prefixed = {"pattern_type": "PREFIXED"}
    _set_alice(c, who, [
        acl(T, "pay", "READ"),  # literal pay
        acl(T, "pay", "WRITE") | prefixed,  # prefix pay*
        acl(T, "*", "DESCRIBE"),  # literal wildcard
        acl(T, "payments", "READ"),  # literal payments
        acl("GROUP", "pay", "READ"),
        acl(T, "pay", "READ", principal="User:bob"),
    ])  # fmt: skip

    def names(answer: list[dict[str, str]]) -> list[tuple[str, str, str, str]]:
        return sorted(
            (a["resource_type"], a["resource_name"], a["pattern_type"], a["operation"])
            for a in answer
        )

    # MATCH: every binding that applies to topic "payments" (literal, * and prefix pay).
    r = c.request("DELETE", "/acls", headers=who.root, json={"filters": [
        {"resource_type": "TOPIC", "resource_name": "payments", "pattern_type": "MATCH",
         "principal": "User:alice", "operation": "WRITE"},
        # ANY: every pattern type, exactly the name "pay" (the literal and the group's).
        {"resource_name": "pay", "pattern_type": "ANY", "principal": "User:alice",
         "operation": "READ"},
        {"resource_type": "TOPIC", "resource_name": "*", "pattern_type": "LITERAL"},
    ]})  # fmt: skip
    assert r.status_code == 200, r.text
    results = [names(f["acls"]) for f in r.json()["filter_results"]]
    assert results == [
        [(T, "pay", "PREFIXED", "WRITE")],
        [("GROUP", "pay", "LITERAL", "READ"), (T, "pay", "LITERAL", "READ")],
        [(T, "*", "LITERAL", "DESCRIBE")],
    ]
    assert names(r.json()["acls"]) == sorted(x for result in results for x in result)
    left = c.get("/acls", headers=who.root).json()["acls"]
    assert {(a["principal"], a["resource_name"]) for a in left} == {
        ("User:alice", "payments"),
        ("User:bob", "pay"),
    }
    # One filter in the query string still works; both forms at once do not.
    r = c.request("DELETE", "/acls?principal=User:bob", headers=who.root, json={"filters": [{}]})
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_REQUEST"
    r = c.request("DELETE", "/acls", headers=who.root, json={"filters": []})
    assert r.status_code == 400
    r = c.delete("/acls?principal=User:bob", headers=who.root)
    assert r.status_code == 200 and [a["principal"] for a in r.json()["acls"]] == ["User:bob"]
    # Refused to a principal without ALTER on the cluster, and nothing changed.
    r = c.request("DELETE", "/acls", headers=who.alice, json={"filters": [{}]})
    assert r.status_code == 403 and r.json()["error_code"] == "CLUSTER_AUTHORIZATION_FAILED"
    assert len(c.get("/acls", headers=who.root).json()["acls"]) == 1
