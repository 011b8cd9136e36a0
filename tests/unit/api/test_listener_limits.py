"""The listener's limits: connection accounting and the head-size rule, without sockets."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.api.errors import status_for
from app.api.limits import (
    ConnectionCounter,
    ConnectionQuotaExceeded,
    HeadersTooLarge,
    ListenerLimits,
    RequestReadTimeout,
    TooManyConnections,
    head_bytes,
)
from app.config import Settings


def limits(total: int = 4, per_ip: int = 2) -> ListenerLimits:
    return ListenerLimits.from_settings(
        Settings(max_connections=total, max_connections_per_ip=per_ip), fd_budget=1_000_000
    )


def test_connections_are_limited_per_address_then_in_total() -> None:
    counter = ConnectionCounter(limits())
    assert counter.admit("a") is None and counter.admit("a") is None
    assert isinstance(counter.admit("a"), ConnectionQuotaExceeded)
    assert counter.admit("b") is None and counter.admit("c") is None
    assert isinstance(counter.admit("d"), TooManyConnections)
    counter.release("a")
    assert counter.admit("d") is None
    assert counter.total == 4 and counter.of("a") == 1


@given(st.lists(st.tuples(st.booleans(), st.sampled_from("abc")), max_size=60))
def test_counts_match_a_model(ops: list[tuple[bool, str]]) -> None:
    counter = ConnectionCounter(limits(total=5, per_ip=3))
    model: dict[str, int] = {}
    for opening, address in ops:
        if opening:
            refused = counter.admit(address)
            allowed = sum(model.values()) < 5 and model.get(address, 0) < 3
            assert (refused is None) == allowed
            if allowed:
                model[address] = model.get(address, 0) + 1
        elif model.get(address):
            counter.release(address)
            model[address] -= 1
        assert counter.total == sum(model.values())
        assert all(counter.of(a) == n for a, n in model.items())


def test_connections_never_take_more_than_half_the_descriptors() -> None:
    capped = ListenerLimits.from_settings(Settings(max_connections=10_000), fd_budget=1024)
    assert capped.max_connections == 512


def test_head_bytes_stop_at_the_blank_line() -> None:
    assert head_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nBODY") == len(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    assert head_bytes(b"X-Big: aaaa") == 11


def test_each_refusal_has_its_status() -> None:
    assert status_for(TooManyConnections(1)) == 503
    assert status_for(ConnectionQuotaExceeded("a", 1)) == 429
    assert status_for(HeadersTooLarge("header fields", 1)) == 431
    assert status_for(RequestReadTimeout("body", 1)) == 408
