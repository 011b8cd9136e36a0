"""app/core/listeners.py: every listener hears, whatever another one does."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from app.core.listeners import notify

log = logging.getLogger("test.listeners")


def test_a_failing_listener_is_logged_and_the_next_still_hears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    heard: list[tuple[object, ...]] = []

    def broken(*args: object) -> None:
        raise RuntimeError("bug")

    listeners: list[Callable[..., object]] = [broken, lambda *a: heard.append(a)]
    with caplog.at_level(logging.ERROR, logger="test.listeners"):
        notify(listeners, "t", 3, True, log=log, what="leadership listener")
    assert heard == [("t", 3, True)]
    [record] = caplog.records
    assert record.getMessage() == "leadership listener failed for t, 3, True"
    assert record.exc_info is not None


def test_a_listener_added_while_telling_hears_the_next_change_only() -> None:
    heard: list[str] = []
    listeners: list[Callable[..., object]] = []

    def first(topic: str) -> None:
        heard.append(f"first {topic}")
        listeners.append(lambda t: heard.append(f"late {t}"))

    listeners.append(first)
    notify(listeners, "a", log=log, what="topic listener")
    assert heard == ["first a"]
