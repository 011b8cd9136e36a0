"""The ACL APIs' wire codes (``app/kafka/apis/acls.py``) are Kafka's, as a client that
defines all of them (kafka-python) numbers them, and the kinds the model does not keep
are named in the refusal."""

from __future__ import annotations

import pytest
from kafka.admin._acls import (
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourceType,
)

from app.core.security.acl import InvalidAcl
from app.kafka.apis.acls import (
    OPERATIONS,
    PATTERN_TYPES,
    PERMISSIONS,
    RESOURCE_TYPES,
    UNKEPT_OPERATIONS,
    UNKEPT_RESOURCE_TYPES,
    Unkept,
    _code,
    _decode,
)


@pytest.mark.parametrize(
    ("ours", "unkept", "theirs"),
    [
        (RESOURCE_TYPES, UNKEPT_RESOURCE_TYPES, ResourceType),
        (PATTERN_TYPES, {}, ACLResourcePatternType),
        (OPERATIONS, UNKEPT_OPERATIONS, ACLOperation),
        (PERMISSIONS, {}, ACLPermissionType),
    ],
)
def test_codes_are_kafkas(ours: dict[int, object], unkept: dict[int, str], theirs: type) -> None:
    for code, value in ours.items():
        assert theirs(code).name == value.value  # type: ignore[attr-defined]
        assert _code(value) == code  # type: ignore[arg-type]
    for code, name in unkept.items():
        if code in {m.value for m in theirs}:  # type: ignore[attr-defined]
            assert theirs(code).name == name
    # Every code the client defines but UNKNOWN is either kept or named as not kept.
    assert {m.value for m in theirs} - {0} <= set(ours) | set(unkept)  # type: ignore[attr-defined]


def test_unkept_and_unknown_codes_are_refused_with_a_reason() -> None:
    with pytest.raises(Unkept, match="Logbus keeps no ACLs with resource type DELEGATION_TOKEN"):
        _decode(RESOURCE_TYPES, UNKEPT_RESOURCE_TYPES, 6, "resource type")
    with pytest.raises(InvalidAcl, match="operation code 0 is not valid"):
        _decode(OPERATIONS, UNKEPT_OPERATIONS, 0, "operation")
