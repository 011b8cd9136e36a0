"""The optional C extensions are built where the suite runs in CI.

All are ``optional=True`` in setup.py: a machine without a C compiler still installs
and runs the pure-Python twins, and their tests skip the compiled side there. In CI
(``CI=true``) a missing build is a failure, never a silent skip: ``make install``
compiles them on a fresh machine, and the tests comparing the twins must run.
"""

from __future__ import annotations

import importlib
import os

import pytest

EXTENSIONS = (
    "app.client.producer._native",
    "app.common._jsonrecords",
    "app.common.schemas._avroenc",
    "app.common.schemas._avrodec",
)


@pytest.mark.parametrize("name", EXTENSIONS)
def test_the_compiled_extension_is_built_in_ci(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is not built ({exc}): make install compiles it")
        pytest.skip(f"{name} is not built here (no C compiler?)")
