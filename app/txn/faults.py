"""Test-only fault injection: a coordinator that dies in the middle of completing a
transaction.

``LOGBUS_TEST_TXN_CRASH=<point>`` (read once, when this module is imported) ends the
process with ``os._exit`` (no shutdown code runs, as with ``kill -9``) when the
coordinator reaches that point; the end-to-end tests use it to restart a broker that
had written PrepareCommit and only some markers. Points: ``after-first-marker``. Unset
(the default, and always in production) it costs one comparison.
"""

from __future__ import annotations

import os

_CRASH_AT = os.environ.get("LOGBUS_TEST_TXN_CRASH", "")


def crash_point(name: str) -> None:
    if name == _CRASH_AT:
        os._exit(137)
