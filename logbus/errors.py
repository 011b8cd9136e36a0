"""Every error the SDK raises: the broker's classes by Kafka error name, and client-only ones.

``except logbus.errors.OffsetOutOfRange`` catches what the broker answered as
``OFFSET_OUT_OF_RANGE`` (see :mod:`app.client.errors` for how an answer becomes a class);
``logbus.errors.BrokerUnavailable`` and the other client-only classes are raised by the SDK
itself. ``is_retriable(exc)`` says whether trying again can help.
"""

from app.client.errors import (
    BrokerUnavailable as BrokerUnavailable,
)
from app.client.errors import (
    BufferFull as BufferFull,
)
from app.client.errors import (
    ClientError as ClientError,
)
from app.client.errors import (
    ConsumerClosed as ConsumerClosed,
)
from app.client.errors import (
    DeliveryTimeout as DeliveryTimeout,
)
from app.client.errors import (
    NetworkTimeout as NetworkTimeout,
)
from app.client.errors import (
    NoOffsetForPartition as NoOffsetForPartition,
)
from app.client.errors import (
    ProducerClosed as ProducerClosed,
)
from app.client.errors import (
    ServerError as ServerError,
)
from app.client.errors import (
    TransactionAborted as TransactionAborted,
)
from app.client.errors import (
    UnsupportedByBroker as UnsupportedByBroker,
)
from app.client.errors import (
    is_retriable as is_retriable,
)

# The broker's error tree, whole: one class per Kafka error name.
from app.common.errors import *  # noqa: F403
from app.common.group_errors import *  # noqa: F403
