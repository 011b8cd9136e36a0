"""The transactional producer's client-side rules (Kafka's TransactionManager states),
without a broker: what each state allows, and how batch failures move it."""

from __future__ import annotations

import pytest

from app.client._cluster import Cluster
from app.client.errors import DeliveryTimeout
from app.client.producer import txn
from app.client.producer.accumulator import RecordAccumulator
from app.client.producer.config import ProducerConfig
from app.common.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    ProducerFenced,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)


def manager() -> txn.TransactionManager:
    cfg = ProducerConfig(transactional_id="t", acks="all")
    return txn.TransactionManager(
        RecordAccumulator(cfg, lambda: None), cfg, Cluster("http://127.0.0.1:1")
    )


def ready() -> txn.TransactionManager:
    m = manager()
    m.acc.set_producer(7, 0, transactional=True)
    m.state = txn.READY  # what init() leaves after InitProducerId
    return m


def test_a_transactional_config_needs_acks_all_and_idempotence() -> None:
    with pytest.raises(ValueError, match="acks=all"):
        ProducerConfig(transactional_id="t", acks="1")
    with pytest.raises(ValueError, match="idempotence"):
        ProducerConfig(transactional_id="t", acks="all", enable_idempotence=False)
    with pytest.raises(ValueError, match="idempotence"):
        ProducerConfig(transactional_id="", acks="all")


def test_nothing_before_init_and_no_send_outside_a_transaction() -> None:
    m = manager()
    for call in (m.check_send, m.begin, m.check_commit, m.begin_abort):
        with pytest.raises(InvalidTxnState, match="UNINITIALIZED"):
            call()
    m = ready()
    with pytest.raises(InvalidTxnState, match="outside a transaction"):
        m.check_send()
    m.begin()
    m.check_send()
    with pytest.raises(InvalidTxnState, match="begin"):
        m.begin()


@pytest.mark.parametrize(
    "failure", [DeliveryTimeout("not acknowledged"), TopicAuthorizationFailed("no WRITE")]
)
def test_an_abortable_error_must_be_aborted(failure: Exception) -> None:
    m = ready()
    m.begin()
    m.batch_failed(failure)
    assert m.state == txn.ABORTABLE_ERROR
    for call in (m.check_send, m.check_commit, m.begin):
        with pytest.raises(type(failure)):
            call()
    m.begin_abort()
    assert m.state == txn.ABORTING
    m.batch_failed(DeliveryTimeout("in flight when aborted"))  # ignored while aborting
    assert m.state == txn.ABORTING


@pytest.mark.parametrize(
    "error",
    [
        InvalidProducerEpoch("t", 0, 7, 0, 1),  # a partition's answer to a zombie
        TransactionalIdAuthorizationFailed("no WRITE on the transactional id"),
    ],
)
def test_fencing_and_refusals_are_fatal(error: Exception) -> None:
    m = ready()
    m.begin()
    m.batch_failed(error)
    assert m.state == txn.FATAL_ERROR
    expected = ProducerFenced if isinstance(error, InvalidProducerEpoch) else type(error)
    assert isinstance(m.acc.fatal, expected)
    for call in (m.check_send, m.check_commit, m.begin, m.begin_abort):
        with pytest.raises(expected):
            call()


def test_a_partitions_invalid_epoch_is_reported_as_fenced() -> None:
    fenced = txn.as_fenced(InvalidProducerEpoch("orders", 0, 7, 0, 1))
    assert isinstance(fenced, ProducerFenced)
    assert fenced.error_code == "PRODUCER_FENCED" and fenced.fields()["current_epoch"] == 1
    other = DeliveryTimeout("x")
    assert txn.as_fenced(other) is other


def test_a_commit_whose_end_txn_failed_retriably_can_be_sent_again() -> None:
    """Kafka's commitTransaction after a TimeoutException: the outcome is unknown, so the
    transaction is neither aborted nor failed; the same commit may be sent again (the
    coordinator answers a repeated commit of a committed transaction with success)."""
    import asyncio

    import httpx

    cfg = ProducerConfig(transactional_id="t", acks="all", max_block_ms=50)
    m = txn.TransactionManager(
        RecordAccumulator(cfg, lambda: None), cfg, Cluster("http://127.0.0.1:1")
    )
    m.acc.set_producer(7, 0, transactional=True)
    m.state = txn.IN_TRANSACTION
    m._started = True  # a partition was added: EndTxn must be sent

    async def commit() -> BaseException:
        async with httpx.AsyncClient(base_url="http://127.0.0.1:1") as client:
            with pytest.raises(Exception) as caught:
                await m.end(client, True)
        return caught.value

    error = asyncio.run(commit())
    assert getattr(error, "retriable", False), error
    assert m.state == txn.COMMITTING and m.error is None
    m.check_commit()  # allowed again
    with pytest.raises(InvalidTxnState):
        m.begin()  # but nothing new starts while the commit is undecided
