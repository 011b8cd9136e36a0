"""Test-only fault injection: a slow disk under leader appends.

``LOGBUS_TEST_SLOW_APPEND_MS=N`` (read once, when this module is imported) makes
every leader append sleep a random 0..N ms first, inside the partition's
leader/ISR lock, where a slow write or fsync would stall. The replication-safety
tests set it on their brokers to widen the window between a request's leadership
check and its write, where leadership may move. Unset (the default, and always in
production) it costs one comparison per append.
"""

from __future__ import annotations

import os
import random
import time

_SLOW_APPEND_MS = float(os.environ.get("LOGBUS_TEST_SLOW_APPEND_MS", "0") or 0)


def slow_append() -> None:
    if _SLOW_APPEND_MS > 0:
        time.sleep(random.uniform(0, _SLOW_APPEND_MS) / 1000)
