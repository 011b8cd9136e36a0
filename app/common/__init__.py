"""What the broker and its clients share: the error tree (and how an error answer's body
becomes its class), the record-batch codec, the partitioner, the HTTP/1.1 response reader,
the fetch-answer interpreter and a cancellation-safe event wait.

``app.core`` (the broker's engine), ``app.client`` (the SDK) and ``app.spark`` import
from here; nothing here imports them, FastAPI or the broker's settings. In Kafka's terms
this is the ``common`` module both the broker and the clients are built on.
"""
