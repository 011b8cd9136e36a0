"""The verified client certificate of each TLS connection, for the security door.

Kafka's SSL listener names a client by its certificate: with the default
``ssl.principal.mapping.rules=DEFAULT`` the principal is ``User:`` + the subject's
distinguished name in RFC 2253 form, most specific part first, no spaces
(``User:CN=alice,OU=eng,O=Example``). The same string is produced here (RFC 4514, the
successor of 2253, as ``cryptography`` writes it), so ACLs written for Kafka apply.

The HTTP protocol (app/api/protocol.py) records the name when a connection that presented
a certificate is made and forgets it when the connection is lost (a WebSocket keeps its
connection, so it keeps the name too). The ASGI scope of both HTTP and WebSocket carries
``client`` and ``server`` addresses, which together name one live TCP connection:
:func:`peer_name` looks it up with them. A dict lookup per request; event loop only.
"""

from __future__ import annotations

import ssl
from typing import Any

from starlette.types import Scope

Key = tuple[Any, Any]
_NAMES: dict[Key, str] = {}


def subject_name(der: bytes) -> str:
    """The RFC 4514 subject DN of a DER certificate (``CN=alice,O=Example``)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def connected(ssl_object: ssl.SSLObject | None, client: Any, server: Any) -> Key | None:
    """Record the connection's verified certificate subject; its key (to forget) or None."""
    if ssl_object is None or client is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    key = (tuple(client), tuple(server) if server else None)
    _NAMES[key] = subject_name(der)
    return key


def lost(key: Key | None) -> None:
    if key is not None:
        _NAMES.pop(key, None)


def peer_name(scope: Scope) -> str | None:
    """The subject DN of the certificate the scope's connection presented, if any."""
    if not _NAMES:
        return None
    client, server = scope.get("client"), scope.get("server")
    if client is None:
        return None
    return _NAMES.get((tuple(client), tuple(server) if server else None))
