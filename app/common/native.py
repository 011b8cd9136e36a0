"""The optional C extensions' entry points, each looked up once where it is used.

setup.py builds the extensions with ``optional=True``: on a machine without a C compiler
the install still succeeds and the extension module is missing. :func:`optional` answers
None then, and every caller keeps a pure-Python path that gives the same bytes (the tests
compare the two where both exist). No I/O beyond the import.
"""

from __future__ import annotations

import importlib
from typing import Any


def optional(module: str, name: str) -> Any:
    """``module.name`` from an optional C extension, or None where it was not built.

    The caller states the type it expects, e.g.
    ``plain_tuples: _jsonrecords.PlainTuples | None = optional(...)``.
    """
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:  # pragma: no cover - where no C compiler built it
        return None
