"""Kafka's ACL model and authorizer, as pure logic: no I/O, no clock, no threads.

An ACL binding is Kafka's ``AclBinding``: a resource pattern (resource type, name,
pattern type) and an access control entry (principal, host, operation, permission).
``Authorizer.authorize`` decides one action the way Kafka's ``AclAuthorizer`` /
``StandardAuthorizer`` do:

1. a principal listed in ``super_users`` may do anything;
2. the ACLs that *match the resource* are those whose pattern is LITERAL with the same
   name, LITERAL with the wildcard name ``*``, or PREFIXED with a prefix of the name;
3. **deny wins**: a matching DENY ACL whose principal is the caller or ``User:*``, whose
   host is the caller's or ``*``, and whose operation is the one asked or ALL, refuses;
4. else a matching ALLOW ACL for the principal/host allows when its operation is ALL, the
   one asked, or one that *implies* it: DESCRIBE is implied by READ, WRITE, DELETE and
   ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS (Kafka's ``AclEntry.supportedOperations``
   table; a DENY of READ does not deny DESCRIBE, as in Kafka);
5. with no ACL at all matching the resource (any principal, any operation), the answer
   is ``allow_everyone_if_no_acl_found`` (Kafka's ``allow.everyone.if.no.acl.found``,
   false by default).

Filters (``AclBindingFilter``) select bindings for DescribeAcls and DeleteAcls: ``None``
fields and the ``ANY`` enums match everything; the pattern type ``MATCH`` selects every
binding that would *apply to* the named resource (its LITERAL name, the LITERAL
wildcard, and PREFIXED prefixes of it).

Concurrency: an :class:`AclSnapshot` is immutable; the :class:`Authorizer` swaps in a new
one in one assignment when its store reloads, and its decision cache belongs to the
snapshot it was computed from, so readers on any thread see one consistent set.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"
# Largest number of decisions one snapshot remembers; cleared (not evicted) when full,
# which keeps each decision a dict lookup and the memory bounded.
DECISION_CACHE_SIZE = 100_000


class _Named(enum.Enum):
    """An enum whose values are its members' names (Kafka's names, as the API spells them)."""

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: list[Any]) -> str:
        return name


class ResourceType(_Named):
    ANY = enum.auto()  # filters only
    TOPIC = enum.auto()
    GROUP = enum.auto()
    CLUSTER = enum.auto()
    TRANSACTIONAL_ID = enum.auto()


class PatternType(_Named):
    ANY = enum.auto()  # filters only: any pattern type
    MATCH = enum.auto()  # filters only: every binding that applies to the named resource
    LITERAL = enum.auto()
    PREFIXED = enum.auto()


class Operation(_Named):
    ANY = enum.auto()  # filters only
    ALL = enum.auto()
    READ = enum.auto()
    WRITE = enum.auto()
    CREATE = enum.auto()
    DELETE = enum.auto()
    ALTER = enum.auto()
    DESCRIBE = enum.auto()
    CLUSTER_ACTION = enum.auto()
    DESCRIBE_CONFIGS = enum.auto()
    ALTER_CONFIGS = enum.auto()
    IDEMPOTENT_WRITE = enum.auto()


class Permission(_Named):
    ANY = enum.auto()  # filters only
    ALLOW = enum.auto()
    DENY = enum.auto()


# The operations an ALLOW ACL of the key grants besides itself (Kafka's implied operations).
IMPLIES: dict[Operation, frozenset[Operation]] = {
    Operation.READ: frozenset({Operation.DESCRIBE}),
    Operation.WRITE: frozenset({Operation.DESCRIBE}),
    Operation.DELETE: frozenset({Operation.DESCRIBE}),
    Operation.ALTER: frozenset({Operation.DESCRIBE}),
    Operation.ALTER_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS}),
}
# The ALLOW operations that grant the key: the inverse of IMPLIES, plus the key and ALL.
GRANTED_BY: dict[Operation, frozenset[Operation]] = {
    op: frozenset({op, Operation.ALL} | {o for o, implied in IMPLIES.items() if op in implied})
    for op in Operation
    if op not in (Operation.ANY, Operation.ALL)
}
# Which operations make sense on which resource type (Kafka's per-resource table);
# creating an ACL outside it is refused, as Kafka's CreateAcls does.
VALID_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.ALL,
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset(
        {Operation.ALL, Operation.READ, Operation.DELETE, Operation.DESCRIBE}
    ),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.ALL,
            Operation.CREATE,
            Operation.ALTER,
            Operation.DESCRIBE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.ALL, Operation.WRITE, Operation.DESCRIBE}),
}
# Kafka names the one cluster resource "kafka-cluster".
CLUSTER_NAME = "kafka-cluster"


class InvalidAcl(ValueError):
    """An ACL binding or filter that cannot be stored or applied; the message says why."""


def check_principal(principal: str) -> str:
    """``User:alice`` (a type, a colon, a non-empty name); the wildcard ``User:*`` too.

    A name may hold inner spaces (a certificate's subject DN, ``User:CN=alice,OU=Dev
    Team``, as Kafka allows), not leading or trailing blanks nor control characters."""
    kind, colon, name = principal.partition(":")
    if (
        not colon
        or not kind
        or not name.strip()
        or name != name.strip()
        or any(c.isspace() for c in kind)
        or any(ord(c) < 32 or c in "\x7f\t\n\r" for c in principal)
    ):
        raise InvalidAcl(f"principal {principal!r} is not TYPE:NAME (e.g. User:alice)")
    return principal


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One stored ACL: Kafka's ``AclBinding`` flattened (pattern and entry in one record)."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> AclBinding:
        """This binding when it may be stored, else :class:`InvalidAcl` saying why."""
        if self.resource_type is ResourceType.ANY:
            raise InvalidAcl("a stored ACL names a resource type, not ANY")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAcl("a stored ACL's pattern type is LITERAL or PREFIXED")
        if self.operation is Operation.ANY or self.permission is Permission.ANY:
            raise InvalidAcl("a stored ACL names an operation and a permission, not ANY")
        if not self.name:
            raise InvalidAcl("a resource name is not empty")
        if self.pattern_type is PatternType.PREFIXED and self.name == WILDCARD:
            raise InvalidAcl("the wildcard '*' is a LITERAL name; PREFIXED '*' means nothing")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise InvalidAcl(f"the cluster resource is named {CLUSTER_NAME!r}")
        if self.operation not in VALID_OPERATIONS[self.resource_type]:
            raise InvalidAcl(
                f"operation {self.operation.value} does not apply to a "
                f"{self.resource_type.value} resource"
            )
        check_principal(self.principal)
        if not self.host:
            raise InvalidAcl("a host is an address or '*'")
        return self

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's pattern matches the resource (step 2 of the docstring)."""
        if self.resource_type is not resource_type:
            return False
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def to_json(self) -> dict[str, str]:
        return {
            "resource_type": self.resource_type.value,
            "resource_name": self.name,
            "pattern_type": self.pattern_type.value,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.value,
            "permission": self.permission.value,
        }

    @classmethod
    def from_json(cls, data: dict[str, str]) -> AclBinding:
        try:
            return cls(
                ResourceType(data["resource_type"]),
                data["resource_name"],
                PatternType(data["pattern_type"]),
                data["principal"],
                data["host"],
                Operation(data["operation"]),
                Permission(data["permission"]),
            )
        except (KeyError, ValueError) as exc:
            raise InvalidAcl(f"not an ACL binding: {exc}") from None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's ``AclBindingFilter``: ``None`` or ANY matches every value of a field."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and acl.resource_type is not (
            self.resource_type
        ):
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is not None:
                if self.resource_type is ResourceType.ANY:
                    if not acl.applies_to(acl.resource_type, self.name):
                        return False
                elif not acl.applies_to(self.resource_type, self.name):
                    return False
        else:
            if self.pattern_type is not PatternType.ANY and acl.pattern_type is not (
                self.pattern_type
            ):
                return False
            if self.name is not None and acl.name != self.name:
                return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation is not Operation.ANY and acl.operation is not self.operation:
            return False
        return self.permission is Permission.ANY or acl.permission is self.permission


@dataclass(frozen=True, slots=True)
class Resource:
    """A concrete resource an action is on: a topic, a group, the cluster, a transactional id."""

    type: ResourceType
    name: str


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a request does: an operation on a resource (Kafka's ``Action``)."""

    operation: Operation
    resource: Resource


@dataclass(eq=False)
class AclSnapshot:
    """An immutable set of ACL bindings, indexed by resource type for the authorizer.

    ``version`` grows with every change the store made (for change notifications).
    """

    bindings: frozenset[AclBinding] = frozenset()
    version: int = 0
    _by_type: dict[ResourceType, tuple[AclBinding, ...]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        by_type: dict[ResourceType, list[AclBinding]] = {}
        for acl in self.bindings:
            by_type.setdefault(acl.resource_type, []).append(acl)
        self._by_type = {t: tuple(v) for t, v in by_type.items()}

    def matching(self, resource: Resource) -> Iterator[AclBinding]:
        """The bindings whose pattern applies to ``resource`` (any principal, any operation)."""
        for acl in self._by_type.get(resource.type, ()):
            if acl.applies_to(resource.type, resource.name):
                yield acl

    def select(self, filt: AclFilter) -> list[AclBinding]:
        return sorted((a for a in self.bindings if filt.matches(a)), key=_sort_key)


def _sort_key(acl: AclBinding) -> tuple[str, ...]:
    return (
        acl.resource_type.value,
        acl.pattern_type.value,
        acl.name,
        acl.principal,
        acl.host,
        acl.operation.value,
        acl.permission.value,
    )


def decide(
    snapshot: AclSnapshot,
    principal: str,
    host: str,
    action: Action,
    super_users: frozenset[str],
    allow_everyone_if_no_acl_found: bool,
) -> bool:
    """Kafka's decision for one action (steps 1-5 of the module docstring), uncached."""
    if principal in super_users:
        return True
    op = action.operation
    matched = False
    allowed = False
    granting = GRANTED_BY[op]
    for acl in snapshot.matching(action.resource):
        matched = True
        if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
            continue
        if acl.host != host and acl.host != WILDCARD:
            continue
        if acl.permission is Permission.DENY:
            if acl.operation is op or acl.operation is Operation.ALL:
                return False
        elif acl.operation in granting:
            allowed = True
    if not matched:
        return allow_everyone_if_no_acl_found
    return allowed


class Authorizer:
    """Decides actions against the current :class:`AclSnapshot`, caching each decision.

    ``authorize`` is a dict lookup once a (principal, host, action) was decided against
    the current snapshot; :meth:`update` swaps the snapshot and drops the cache at once.
    Safe to call from any thread (a decision computed against an old snapshot is never
    stored in the new one's cache: each snapshot has its own).
    """

    def __init__(
        self,
        super_users: Iterable[str] = (),
        allow_everyone_if_no_acl_found: bool = False,
        snapshot: AclSnapshot | None = None,
    ) -> None:
        self.super_users = frozenset(check_principal(p) for p in super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._state: tuple[AclSnapshot, dict[tuple[str, str, Action], bool]] = (
            snapshot or AclSnapshot(),
            {},
        )

    @property
    def snapshot(self) -> AclSnapshot:
        return self._state[0]

    def update(self, snapshot: AclSnapshot) -> None:
        self._state = (snapshot, {})

    def authorize(self, principal: str, host: str, action: Action) -> bool:
        snapshot, cache = self._state
        key = (principal, host, action)
        decision = cache.get(key)
        if decision is None:
            decision = decide(
                snapshot,
                principal,
                host,
                action,
                self.super_users,
                self.allow_everyone_if_no_acl_found,
            )
            if len(cache) >= DECISION_CACHE_SIZE:
                cache.clear()
            cache[key] = decision
        return decision

    def authorize_any(
        self, principal: str, host: str, op: Operation, resource_type: ResourceType
    ) -> bool:
        """Kafka's ``authorizeByResourceType``: whether the principal may do ``op`` on *some*
        resource of the type (InitProducerId without a transactional id asks it for WRITE
        on topics, KIP-679). True when an ALLOW binding of the principal (or ``User:*``)
        for this host grants ``op`` on a name that no DENY of ``op``/ALL covers: a DENY on
        the wildcard covers everything, a PREFIXED DENY covers the names and prefixes it
        starts, a LITERAL DENY its own name. With ``allow_everyone_if_no_acl_found`` only a
        DENY on the wildcard refuses (as Kafka's AclAuthorizer). Not cached (rare calls)."""
        if principal in self.super_users:
            return True
        mine = [
            a
            for a in self.snapshot.bindings
            if a.resource_type is resource_type
            and a.principal in (principal, WILDCARD_PRINCIPAL)
            and a.host in (host, WILDCARD)
        ]
        denies = [
            a
            for a in mine
            if a.permission is Permission.DENY and a.operation in (op, Operation.ALL)
        ]
        if any(d.pattern_type is PatternType.LITERAL and d.name == WILDCARD for d in denies):
            return False
        if self.allow_everyone_if_no_acl_found:
            return True  # as Kafka's: only a DENY on every resource refuses then
        denied_prefixes = [d.name for d in denies if d.pattern_type is PatternType.PREFIXED]
        denied_names = {d.name for d in denies if d.pattern_type is PatternType.LITERAL}
        for a in mine:
            if a.permission is not Permission.ALLOW or a.operation not in GRANTED_BY[op]:
                continue
            if any(a.name.startswith(prefix) for prefix in denied_prefixes):
                continue
            if a.pattern_type is PatternType.LITERAL and a.name in denied_names:
                continue
            return True
        return False
