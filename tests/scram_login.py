"""One SCRAM login on a Kafka door, answered in milliseconds either way.

kafka-python's clients take a refused login for a connection problem and retry it until
their bootstrap timeout (30 s by default), so a test asking "is this password refused?"
through them waits the whole timeout, and would pass just as well on a broker that never
answered. This speaks the exchange itself: SaslHandshake v1 and two SaslAuthenticate v2
rounds (kio), with kafka-python's own SCRAM client computing the messages, so the client
side is not the library the broker's side uses (scramp). A refusal is told apart from
every other outcome: only SASL_AUTHENTICATION_FAILED answers False; anything else
(another error, a closed connection, a server signature that does not verify) raises.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any


class _Wire:
    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.correlation = 0

    def call(self, request: Any, response_type: type) -> Any:
        from kio.serial import entity_reader, entity_writer

        self.correlation += 1
        out = io.BytesIO()
        header_type = request.__header_schema__
        entity_writer(header_type)(
            out,
            header_type(
                request_api_key=request.__api_key__,
                request_api_version=request.__version__,
                correlation_id=self.correlation,
                client_id="scram-login",
            ),
        )
        entity_writer(type(request))(out, request)
        payload = out.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError(f"the broker closed the connection after {request!r}")
            data += chunk
        _, size = entity_reader(response_type.__header_schema__)(data, 4)
        return entity_reader(response_type)(data, 4 + size)[0]


def scram_login(
    host: str,
    port: int,
    user: str,
    password: str,
    mechanism: str = "SCRAM-SHA-256",
    *,
    timeout: float = 10.0,
) -> bool:
    """True if ``user`` logs in with ``password`` by ``mechanism`` at host:port (the
    broker's final message verified), False if the broker answers
    SASL_AUTHENTICATION_FAILED; raises on anything else."""
    from kafka.net.sasl.scram import ScramClient
    from kio.schema.errors import ErrorCode
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
    from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

    wire = _Wire(host, port, timeout)
    try:
        handshake = wire.call(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse)
        if handshake.error_code != ErrorCode.none:
            raise AssertionError(f"SaslHandshake({mechanism}) answered {handshake.error_code}")
        client = ScramClient(user, password, mechanism)
        first = wire.call(
            SaslAuthenticateRequest(auth_bytes=client.first_message()), SaslAuthenticateResponse
        )
        if first.error_code == ErrorCode.sasl_authentication_failed:
            return False  # an unknown user is refused at the first round
        if first.error_code != ErrorCode.none:
            raise AssertionError(f"client-first answered {first.error_code}")
        client.process_server_first_message(first.auth_bytes)
        final = wire.call(
            SaslAuthenticateRequest(auth_bytes=client.final_message()), SaslAuthenticateResponse
        )
        if final.error_code == ErrorCode.sasl_authentication_failed:
            return False
        if final.error_code != ErrorCode.none:
            raise AssertionError(f"client-final answered {final.error_code}")
        client.process_server_final_message(final.auth_bytes)  # raises if it does not verify
        return True
    finally:
        wire.sock.close()
