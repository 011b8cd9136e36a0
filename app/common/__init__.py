"""What the broker and its clients share: the error tree, the record-batch codec, the
partitioner.

``app.core`` (the broker's engine), ``app.client`` (the SDK) and ``app.spark`` import
from here; nothing here imports them, FastAPI or the broker's settings. In Kafka's terms
this is the ``common`` module both the broker and the clients are built on.
"""
