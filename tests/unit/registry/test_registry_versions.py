"""A path's schema version: digits Python's ``int`` reads but that are not ASCII (found by
schemathesis: ``/versions/²/referencedby`` answered 500) are refused with 42202."""

from __future__ import annotations

import pytest

from app.common.schema_errors import InvalidSchemaVersion
from app.registry.service import LATEST, parse_version


@pytest.mark.parametrize(
    "raw", ["\u00b2", "\u0661", "\u0663\u0664", "0", "2147483648", "", "1.0", " "]
)
def test_a_version_that_is_not_ascii_digits_in_range_is_refused(raw: str) -> None:
    with pytest.raises(InvalidSchemaVersion):
        parse_version(raw)


@pytest.mark.parametrize(
    ("raw", "want"), [("1", 1), (" 7 ", 7), ("latest", LATEST), ("-1", LATEST)]
)
def test_versions_read(raw: str, want: int | str) -> None:
    assert parse_version(raw) == want
