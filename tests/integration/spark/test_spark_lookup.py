"""The driver's retried offset lookups (app.spark.lookup): no Spark or broker needed."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from app.client import Admin
from app.client.errors import BrokerUnavailable
from app.common.errors import InvalidRequest, UnknownTopicOrPartition
from app.spark.lookup import BACKOFF_MAX_S, RetryPolicy, retried
from app.spark.options import OptionError


class VirtualTime:
    """A clock that only sleeping moves on."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _failing(
    times: int, error: Exception, answer: object = "answer"
) -> tuple[list[int], Callable[[Admin], object]]:
    """A lookup that fails with ``error`` ``times`` times, then answers; and its calls."""
    calls: list[int] = []

    def call(_admin: Admin) -> object:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return answer

    return calls, call


def test_lookups_retry_what_may_pass_with_backoff_until_they_are_answered() -> None:
    t = VirtualTime()
    calls, call = _failing(12, BrokerUnavailable("connection refused"))
    got = retried("http://127.0.0.1:1", RetryPolicy(), "x", call, sleep=t.sleep, clock=t.clock)
    assert got == "answer" and len(calls) == 13
    # Backoff doubles from 100 ms up to 1 s; the second attempt starts after the first's 10 s.
    assert t.slept[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert max(t.slept) <= BACKOFF_MAX_S


def test_a_topic_deleted_between_two_calls_is_tried_again() -> None:
    t = VirtualTime()
    calls, call = _failing(1, UnknownTopicOrPartition("re", 0))
    retried("http://127.0.0.1:1", RetryPolicy(), "x", call, sleep=t.sleep, clock=t.clock)
    assert len(calls) == 2


def test_lookups_give_up_after_the_budget_of_spark_kafka_attempts() -> None:
    t = VirtualTime()
    calls, call = _failing(10**6, BrokerUnavailable("connection refused"))
    with pytest.raises(BrokerUnavailable) as caught:
        retried("http://127.0.0.1:1", RetryPolicy(), "planning", call, sleep=t.sleep, clock=t.clock)
    # 3 attempts (fetchOffset.numRetries) of 10 s, 10 ms apart (fetchOffset.retryIntervalMs).
    assert 29 <= t.now <= 31
    assert t.slept.count(0.01) == 2
    assert "planning: gave up after 3 attempts" in "".join(caught.value.__notes__)
    assert len(calls) > 3


def test_errors_that_cannot_pass_are_raised_at_once() -> None:
    t = VirtualTime()
    for error in (InvalidRequest("bad"), OptionError("unknown topic 'x'")):
        calls, call = _failing(1, error)
        with pytest.raises(type(error)):
            retried("http://127.0.0.1:1", RetryPolicy(), "x", call, sleep=t.sleep, clock=t.clock)
        assert len(calls) == 1
    assert t.slept == []


def test_a_broker_that_cannot_be_reached_is_retried_then_reported() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    tries: list[int] = []

    def call(admin: Admin) -> object:
        tries.append(1)
        return admin.list_topics()

    policy = RetryPolicy(attempts=2, interval_s=0, attempt_timeout_s=0.35)
    with pytest.raises(BrokerUnavailable) as caught:
        retried(url, policy, "x", call)
    assert len(tries) >= 4  # 3 tries (0.1 + 0.2 s of backoff) per attempt
    assert f"gave up after 2 attempts ({len(tries)} tries" in "".join(caught.value.__notes__)


def test_the_retry_options_have_spark_kafka_names_and_defaults() -> None:
    assert RetryPolicy.from_options({}) == RetryPolicy(attempts=3, interval_s=0.01)
    # Spark hands options over lower-cased.
    got = RetryPolicy.from_options(
        {"fetchoffset.numretries": "5", "fetchOffset.retryIntervalMs": "250"}
    )
    assert (got.attempts, got.interval_s) == (5, 0.25)
    with pytest.raises(OptionError):
        RetryPolicy.from_options({"fetchOffset.numRetries": "0"})
