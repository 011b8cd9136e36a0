"""The Kafka door: Kafka's binary protocol on a listener of its own, in the broker process.

One module per role: ``frames`` (size-prefixed frames and request headers, sans I/O),
``encode`` (responses to bytes, records left as file slices), ``versions`` (the APIs and
version ranges ApiVersions advertises), ``apis`` (one handler per API, a module per API
family, on the transport-neutral services HTTP uses), ``connection`` (one client connection on asyncio,
``os.sendfile`` for records), ``listener`` (the server, its limits). Messages are kio's,
generated from Kafka's own message definitions (bench/kafka_protocol.py says why).
This package never imports FastAPI, Starlette or uvicorn (tests/unit/test_layering.py).
"""
