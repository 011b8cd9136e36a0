"""Overlapping reloads of the ZooKeeper stores (app/core/replication/zk_watched.py): a
slow whole-set read begun before a write must not be installed over the read that
followed the write. Reads are replaced by controlled ones, so no ZooKeeper runs; the
clients are made, never started."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import ConnectionLoss

from app.core.replication.zk_acls import ZkAclStore
from app.core.replication.zk_quotas import ZkQuotaStore
from app.core.replication.zk_scram import ZkScramStore
from app.core.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from app.core.security.quotas import Entity, QuotaConfig
from app.core.security.users import ScramCredential

NOWHERE = "127.0.0.1:1"


def _acl(principal: str) -> frozenset[AclBinding]:
    return frozenset(
        {
            AclBinding(
                ResourceType.TOPIC,
                "t",
                PatternType.LITERAL,
                principal,
                "*",
                Operation.READ,
                Permission.ALLOW,
            )
        }
    )


def _credential(iterations: int) -> dict[str, dict[str, ScramCredential]]:
    return {"alice": {"SCRAM-SHA-256": ScramCredential(b"s", iterations, b"k", b"v")}}


# Each store, the set its read answers before a write and after it, and how to read
# what it holds now.
STORES: list[tuple[str, Callable[[Path], Any], Any, Any, Callable[[Any], Any]]] = [
    (
        "quotas",
        lambda _: ZkQuotaStore(NOWHERE, 1000),
        QuotaConfig({Entity("alice"): {"producer_byte_rate": 1.0}}),
        QuotaConfig({Entity("alice"): {"producer_byte_rate": 2.0}}),
        lambda store: store.load(),
    ),
    (
        "acls",
        lambda _: ZkAclStore(NOWHERE, 1000),
        _acl("User:old"),
        _acl("User:new"),
        lambda store: store.load().bindings,
    ),
    (
        "scram",
        lambda tmp: ZkScramStore(NOWHERE, 1000, tmp / "users.json"),
        _credential(4096),
        _credential(8192),
        lambda store: store._managed,
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "before", "after", "held"), STORES, ids=[s[0] for s in STORES]
)
def test_a_slow_read_begun_before_a_write_does_not_put_the_old_set_back(
    tmp_path: Path,
    name: str,
    make: Callable[[Path], Any],
    before: Any,
    after: Any,
    held: Callable[[Any], Any],
) -> None:
    store = make(tmp_path)
    in_read = threading.Event()
    release = threading.Event()
    answers = iter([before, after])

    def read_all() -> Any:
        answer = next(answers)
        if answer is before:  # the watch's read: it read the old set, then stalls
            in_read.set()
            assert release.wait(10)
        return answer

    store._read_all = read_all
    stale = threading.Thread(target=store._reload)
    stale.start()
    assert in_read.wait(10)
    try:
        # The write's own reload, begun after the write, reads the new set and installs it.
        store._reload()
        assert held(store) == after
    finally:
        release.set()
        stale.join(10)
    assert not stale.is_alive()
    assert held(store) == after, f"the {name} store put back the set read before the write"


def test_reloads_that_do_not_overlap_install_each_read_in_turn(tmp_path: Path) -> None:
    store = ZkQuotaStore(NOWHERE, 1000)
    sets = [QuotaConfig({Entity("alice"): {"producer_byte_rate": float(i)}}) for i in range(3)]
    answers = iter(sets)
    store._read_all = lambda: next(answers)  # type: ignore[method-assign]
    for expected in sets:
        assert store._reload() == expected
        assert store.load() == expected


@pytest.mark.parametrize(
    ("name", "make", "before", "after", "held"), STORES, ids=[s[0] for s in STORES]
)
def test_a_watch_reload_cut_off_by_a_lost_connection_is_retried(
    tmp_path: Path,
    name: str,
    make: Callable[[Path], Any],
    before: Any,
    after: Any,
    held: Callable[[Any], Any],
) -> None:
    """The change notice's reload is the only one a change gets on the other brokers:
    kazoo's ChildrenWatch re-arms after a reconnection but calls back only when the
    children differ from those it last handed over, so a reload lost to the connection
    must be retried, or the replaced set (a revoked credential, a deleted ACL) holds on
    that broker until some later change."""
    store = make(tmp_path)
    answers: list[Any] = [before, ConnectionLoss(), after]

    def read_all() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    store._read_all = read_all
    store._reload()  # the set before the change
    told: list[Any] = []
    store.watch(told.append)
    # The notice of a change: its read loses the connection mid-way.
    store._on_changes(["config_change_0000000001"])
    deadline = time.monotonic() + 10
    while held(store) != after:
        assert time.monotonic() < deadline, f"the {name} store kept the set the change replaced"
        time.sleep(0.01)
    assert told and held(store) == after
