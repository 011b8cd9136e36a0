"""The authorizer against Kafka's documented semantics (AclAuthorizer / StandardAuthorizer).

Examples name each rule; a property test compares every decision over random ACL sets
with a brute-force reference written from Kafka's documentation, not from the code.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.security.acl import (
    CLUSTER,
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclSnapshot,
    Action,
    Authorizer,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)
from app.core.security.store import FileAclStore

T, G = ResourceType.TOPIC, ResourceType.GROUP
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(
    name: str,
    op: Operation,
    perm: Permission = ALLOW,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = LIT,
    rtype: ResourceType = T,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def allowed(
    acls: list[AclBinding],
    op: Operation,
    name: str = "orders",
    rtype: ResourceType = T,
    principal: str = "User:alice",
    host: str = "10.0.0.1",
    **kw: object,
) -> bool:
    authz = Authorizer(snapshot=AclSnapshot(frozenset(acls)), **kw)  # type: ignore[arg-type]
    return authz.authorize(principal, host, Action(op, Resource(rtype, name)))


def test_no_acl_denies_unless_allow_everyone() -> None:
    assert not allowed([], Op.READ)
    assert allowed([], Op.READ, allow_everyone_if_no_acl_found=True)
    # Once any ACL applies to the resource, allow.everyone.if.no.acl.found no longer does.
    assert not allowed(
        [acl("orders", Op.READ, principal="User:bob")],
        Op.READ,
        **{"allow_everyone_if_no_acl_found": True},
    )


def test_super_users_may_do_anything() -> None:
    deny_all = [acl("orders", Op.ALL, DENY, principal="User:*")]
    assert allowed(deny_all, Op.DELETE, principal="User:root", super_users=["User:root"])
    assert not allowed(deny_all, Op.DELETE, principal="User:alice", super_users=["User:root"])


def test_deny_wins_over_allow() -> None:
    acls = [acl("orders", Op.READ), acl("orders", Op.READ, DENY, principal="User:*")]
    assert not allowed(acls, Op.READ)
    assert not allowed([acl("orders", Op.ALL), acl("ord", Op.ALL, DENY, pattern=PRE)], Op.WRITE)


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed([acl("orders", op)], Op.DESCRIBE)
    assert allowed([acl("orders", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS)
    assert not allowed([acl("orders", Op.DESCRIBE)], Op.READ)
    assert not allowed([acl("orders", Op.DESCRIBE_CONFIGS)], Op.ALTER_CONFIGS)
    assert not allowed([acl("orders", Op.READ)], Op.WRITE)
    assert allowed([acl("orders", Op.ALL)], Op.ALTER_CONFIGS)
    # A DENY only denies its own operation (or ALL): DENY READ leaves DESCRIBE to READ's ALLOW.
    assert allowed([acl("orders", Op.READ), acl("orders", Op.READ, DENY)], Op.DESCRIBE)
    assert not allowed([acl("orders", Op.READ), acl("orders", Op.DESCRIBE, DENY)], Op.DESCRIBE)


def test_patterns_and_wildcards() -> None:
    assert allowed([acl("*", Op.READ)], Op.READ, name="anything")
    assert allowed([acl("ord", Op.READ, pattern=PRE)], Op.READ, name="orders")
    assert not allowed([acl("ord", Op.READ)], Op.READ, name="orders")  # LITERAL is exact
    assert not allowed([acl("orx", Op.READ, pattern=PRE)], Op.READ, name="orders")
    assert allowed([acl("orders", Op.READ, principal="User:*")], Op.READ, principal="User:zed")
    assert not allowed([acl("orders", Op.READ, host="10.0.0.2")], Op.READ, host="10.0.0.1")
    assert allowed([acl("orders", Op.READ, host="10.0.0.1")], Op.READ, host="10.0.0.1")
    # Resource types never mix: a group named like the topic grants nothing on the topic.
    assert not allowed([acl("orders", Op.READ, rtype=G)], Op.READ)


def test_cache_is_dropped_on_update() -> None:
    authz = Authorizer()
    action = Action(Op.READ, Resource(T, "orders"))
    assert not authz.authorize("User:alice", "h", action)
    authz.update(AclSnapshot(frozenset([acl("orders", Op.READ)])))
    assert authz.authorize("User:alice", "h", action)


def test_validation_refuses_meaningless_bindings() -> None:
    with pytest.raises(InvalidAcl):
        acl("orders", Op.IDEMPOTENT_WRITE).validate()  # a cluster operation on a topic
    with pytest.raises(InvalidAcl):
        acl("x", Op.CREATE, rtype=ResourceType.CLUSTER).validate()  # not kafka-cluster
    with pytest.raises(InvalidAcl):
        acl("orders", Op.READ, principal="alice").validate()
    with pytest.raises(InvalidAcl):
        acl("*", Op.READ, pattern=PRE).validate()
    acl(CLUSTER_NAME, Op.IDEMPOTENT_WRITE, rtype=ResourceType.CLUSTER).validate()


def test_filters_as_describe_and_delete_acls() -> None:
    acls = frozenset(
        [
            acl("orders", Op.READ),
            acl("ord", Op.WRITE, pattern=PRE, principal="User:bob"),
            acl("*", Op.DESCRIBE),
            acl("payments", Op.READ),
            acl("orders", Op.READ, rtype=G),
        ]
    )
    snap = AclSnapshot(acls)
    assert len(snap.select(AclFilter())) == 5
    assert {a.name for a in snap.select(AclFilter(T, "orders", PatternType.MATCH))} == {
        "orders",
        "ord",
        "*",
    }
    assert [a.name for a in snap.select(AclFilter(T, "orders", LIT))] == ["orders"]
    assert [a.principal for a in snap.select(AclFilter(principal="User:bob"))] == ["User:bob"]
    assert len(snap.select(AclFilter(resource_type=G))) == 1
    assert len(snap.select(AclFilter(operation=Op.READ, permission=ALLOW))) == 3


def test_file_store_round_trip(tmp_path: Path) -> None:
    store = FileAclStore(tmp_path / "acls.json")
    a, b = acl("orders", Op.READ), acl("o", Op.WRITE, pattern=PRE)
    snap = store.create([a, b])
    assert snap.bindings == {a, b} and snap.version == 1
    assert store.create([a]).version == 1  # already there: no change, no write
    matched, snap = store.delete([AclFilter(pattern_type=PRE)])
    assert matched == [[b]] and snap.bindings == {a} and snap.version == 2
    again = FileAclStore(tmp_path / "acls.json").load()
    assert again.bindings == {a} and again.version == 2
    with pytest.raises(InvalidAcl):
        store.create([acl("orders", Op.IDEMPOTENT_WRITE)])
    assert FileAclStore(tmp_path / "acls.json").load().bindings == {a}


# --- the brute-force reference -------------------------------------------------------

_DESCRIBE_GRANTED_BY = {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}


def reference(
    acls: list[AclBinding],
    principal: str,
    host: str,
    op: Operation,
    rtype: ResourceType,
    name: str,
    super_users: set[str],
    allow_everyone: bool,
) -> bool:
    """Kafka's documented rules, spelled out without the implementation's tables."""
    if principal in super_users:
        return True

    def pattern_matches(a: AclBinding) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == PRE:
            return name[: len(a.name)] == a.name
        return a.name in (name, "*")

    applying = [a for a in acls if pattern_matches(a)]
    if not applying:
        return allow_everyone
    mine = [a for a in applying if a.principal in (principal, "User:*") and a.host in (host, "*")]
    if any(a.permission == DENY and a.operation in (op, Op.ALL) for a in mine):
        return False
    granting = {op, Op.ALL}
    if op == Op.DESCRIBE:
        granting |= _DESCRIBE_GRANTED_BY
    if op == Op.DESCRIBE_CONFIGS:
        granting |= {Op.ALTER_CONFIGS}
    return any(a.permission == ALLOW and a.operation in granting for a in mine)


NAMES = st.sampled_from(["orders", "ord", "o", "orders-eu", "pay", "*"])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*"])
HOSTS = st.sampled_from(["10.0.0.1", "10.0.0.2", "*"])
OPS = st.sampled_from([o for o in Operation if o is not Op.ANY])
TYPES = st.sampled_from([T, G, ResourceType.TRANSACTIONAL_ID])
BINDINGS = st.builds(
    AclBinding,
    TYPES,
    NAMES,
    st.sampled_from([LIT, PRE]),
    PRINCIPALS,
    HOSTS,
    OPS,
    st.sampled_from([ALLOW, DENY]),
)


@settings(max_examples=400, deadline=None)
@given(
    acls=st.lists(BINDINGS, max_size=12),
    principal=st.sampled_from(["User:alice", "User:bob", "User:root"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2"]),
    rtype=TYPES,
    name=st.sampled_from(["orders", "orders-eu", "ord", "pay", "x"]),
    allow_everyone=st.booleans(),
)
def test_matches_brute_force_reference(
    acls: list[AclBinding],
    principal: str,
    host: str,
    rtype: ResourceType,
    name: str,
    allow_everyone: bool,
) -> None:
    supers = {"User:root"}
    authz = Authorizer(supers, allow_everyone, AclSnapshot(frozenset(acls)))
    for op in Operation:
        if op in (Op.ANY, Op.ALL):
            continue
        expected = reference(acls, principal, host, op, rtype, name, supers, allow_everyone)
        action = Action(op, Resource(rtype, name))
        assert authz.authorize(principal, host, action) == expected, (op, acls)
        assert authz.authorize(principal, host, action) == expected  # cached: same answer


def test_cluster_resource() -> None:
    acls = [acl(CLUSTER_NAME, Op.CREATE, rtype=ResourceType.CLUSTER)]
    authz = Authorizer(snapshot=AclSnapshot(frozenset(acls)))
    assert authz.authorize("User:alice", "h", Action(Op.CREATE, CLUSTER))
    assert not authz.authorize("User:alice", "h", Action(Op.IDEMPOTENT_WRITE, CLUSTER))


def test_authorize_any_topic_as_kafka_by_resource_type() -> None:
    """KIP-679: an idempotent producer needs WRITE on some topic no DENY covers."""

    def any_write(acls: list[AclBinding], **kw: object) -> bool:
        authz = Authorizer(snapshot=AclSnapshot(frozenset(acls)), **kw)  # type: ignore[arg-type]
        return authz.authorize_any("User:alice", "h", Op.WRITE, T)

    assert not any_write([])
    assert any_write([], allow_everyone_if_no_acl_found=True)
    assert any_write([acl("orders", Op.WRITE)])
    assert any_write([acl("o", Op.WRITE, pattern=PRE)])
    assert any_write([acl("orders", Op.ALL)])
    assert not any_write([acl("orders", Op.READ)])
    assert not any_write([acl("orders", Op.WRITE), acl("orders", Op.WRITE, DENY)])
    assert not any_write([acl("orders", Op.WRITE), acl("*", Op.ALL, DENY, principal="User:*")])
    assert not any_write([acl("orders", Op.WRITE), acl("ord", Op.WRITE, DENY, pattern=PRE)])
    assert not any_write([acl("ord", Op.WRITE, pattern=PRE), acl("o", Op.WRITE, DENY, pattern=PRE)])
    assert any_write([acl("orders", Op.WRITE), acl("pay", Op.WRITE, DENY, pattern=PRE)])
    assert any_write([acl("x", Op.WRITE, DENY, principal="User:bob")], super_users=["User:alice"])


def test_authorize_any_with_allow_everyone() -> None:
    def any_write(acls: list[AclBinding]) -> bool:
        authz = Authorizer(
            snapshot=AclSnapshot(frozenset(acls)), allow_everyone_if_no_acl_found=True
        )
        return authz.authorize_any("User:alice", "h", Op.WRITE, T)

    assert any_write([acl("orders", Op.READ)])
    assert not any_write([acl("*", Op.WRITE, DENY)])
