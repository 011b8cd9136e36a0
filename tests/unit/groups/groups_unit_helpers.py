"""Helpers for the group unit tests (a unique module name: tests dirs are not packages)."""

from __future__ import annotations


class FakeClock:
    """Monotonic and wall clocks the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return int(self.now * 1000)
