"""``logbus`` is the SDK's import name: the same classes as ``app.client``, nothing of the core.

This directory is not named ``logbus``: pytest puts test directories on ``sys.path``, and
one named like the package would shadow it.
"""

from __future__ import annotations

import subprocess
import sys

import logbus
import logbus.errors
from app import client
from app.client import errors as client_errors
from app.common import errors as core_errors


def test_public_names_are_the_sdk_classes() -> None:
    from logbus import Admin, Consumer, Producer

    assert (Producer, Consumer, Admin) == (client.Producer, client.Consumer, client.Admin)
    for name in logbus.__all__:
        assert getattr(logbus, name) is not None, name


def test_errors_carry_every_broker_error_and_the_client_ones() -> None:
    assert logbus.errors.OffsetOutOfRange is core_errors.OffsetOutOfRange
    assert logbus.errors.BrokerUnavailable is client_errors.BrokerUnavailable
    assert logbus.errors.is_retriable(client_errors.BrokerUnavailable("down"))
    assert issubclass(logbus.errors.BrokerUnavailable, logbus.LogbusError)


def test_importing_logbus_does_not_load_the_broker() -> None:
    """An application importing the SDK must not pay for (or depend on) the server stack."""
    code = "import sys, logbus; print(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'uvicorn', 'kazoo')))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[]"
