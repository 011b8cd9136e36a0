"""The suite's own layout: test dirs are not packages, so module basenames must be unique.

pytest imports each test module by its basename (rootdir "prepend" mode, which
lets suites import their helpers as top-level modules); two files with one name
stop the whole run at collection.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_basenames_are_unique() -> None:
    names = Counter(p.name for p in TESTS.rglob("*.py") if p.name != "conftest.py")
    assert [name for name, count in names.items() if count > 1] == []
