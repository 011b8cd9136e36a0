"""Regular expressions a client hands the broker, run in linear time by RE2.

Python's ``re`` backtracks: a pattern like ``(a+)+b`` against a topic named
``aaaaaaaaaaaaaaaaaaaaaaaaaaa`` takes seconds, on the event loop, for every
heartbeat that evaluates it. A broker therefore never runs a client's
pattern with ``re``: it compiles it with RE2 (Google's binding,
``google-re2``), whose matching time is linear in the input whatever the
pattern, and whose memory per pattern is capped (``MAX_PATTERN_MEMORY``).
Kafka's KIP-848 does the same with RE2/J.

RE2 accepts the usual syntax (classes, alternation, repetition, groups,
``(?i)``) but not backreferences or lookaround, which need backtracking: such
a pattern is refused as INVALID_REQUEST naming the field, as is one whose
compiled program would pass the memory cap.

Compiled patterns are immutable and safe to share between threads.
"""

from __future__ import annotations

from typing import Protocol

import re2

from app.common.errors import InvalidRequest

# RE2's budget for one compiled pattern; a pattern that needs more is refused.
MAX_PATTERN_MEMORY = 8 * 1024 * 1024


class ClientPattern(Protocol):
    """What the broker does with a client's pattern: match whole names."""

    def fullmatch(self, text: str) -> object | None: ...


def compile_client_pattern(regex: str, field: str) -> ClientPattern:
    """``regex`` compiled by RE2; InvalidRequest (naming ``field``) when RE2 refuses it."""
    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False
    try:
        pattern: ClientPattern = re2.compile(regex, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise InvalidRequest(
            f"{field} {regex!r} is not a valid regular expression (INVALID_REGULAR_EXPRESSION): "
            f"{reason}; patterns run under RE2, without backreferences or lookaround"
        ) from None
    return pattern
