"""Client-side TLS: the :class:`ssl.SSLContext` every client connection to a broker uses.

One place for the SDK's httpx clients (:mod:`app.client._http`), the raw fetch
connections (:mod:`app.wire`: the consumer, Spark tasks) and follower brokers'
replica fetchers, so that ``https://`` means the same thing everywhere:

- verification is on: the broker's certificate must chain to the CA bundle and
  name the host of the URL (``check_hostname``); there is no switch to turn it
  off;
- the CA bundle is ``ca_file`` when given (only that bundle is trusted, as a
  private CA is the usual case), else certifi's public roots (httpx's default);
- ``cert_file``/``key_file`` are presented when the broker asks for a client
  certificate (mutual TLS, ``ssl_client_auth``).

Where the options come from: explicit :class:`ClientTls` values (follower
brokers, from their settings), else the process default set by
:func:`configure` (the SDK's ``app.client.configure_tls``), else the
environment: ``LOGBUS_CLIENT_CA_FILE``, ``LOGBUS_CLIENT_CERT_FILE``,
``LOGBUS_CLIENT_KEY_FILE`` (the CLI's ``--ca-file``/``--cert``/``--key`` set
the default too).

Concurrency: contexts are built once per distinct :class:`ClientTls` (loading a
CA bundle costs ~75 ms) and shared; an :class:`ssl.SSLContext` is safe to use
from many threads once configured. :func:`configure` is meant for start-up.
"""

from __future__ import annotations

import functools
import os
import ssl
from dataclasses import dataclass

__all__ = ["ClientTls", "client_context", "configure", "default_context", "default_tls"]


@dataclass(frozen=True, slots=True)
class ClientTls:
    """Where a client's CA bundle and optional certificate are (PEM file paths)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("a client key needs its certificate (cert_file)")

    @classmethod
    def from_env(cls) -> ClientTls:
        """``LOGBUS_CLIENT_CA_FILE``, ``LOGBUS_CLIENT_CERT_FILE``, ``LOGBUS_CLIENT_KEY_FILE``."""
        return cls(
            os.environ.get("LOGBUS_CLIENT_CA_FILE") or None,
            os.environ.get("LOGBUS_CLIENT_CERT_FILE") or None,
            os.environ.get("LOGBUS_CLIENT_KEY_FILE") or None,
        )


@functools.lru_cache(maxsize=16)
def client_context(tls: ClientTls) -> ssl.SSLContext:
    """A verifying client context for ``tls`` (built once per distinct value).

    Raises:
        OSError / ssl.SSLError: a file is missing or is not PEM.
    """
    cafile = tls.ca_file
    if cafile is None:
        import certifi  # httpx's dependency: the same public roots httpx trusts

        cafile = certifi.where()
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile)
    # create_default_context already sets both; stated because they are the point.
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    if tls.cert_file is not None:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


_default: ClientTls | None = None


def configure(
    ca_file: str | os.PathLike[str] | None = None,
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
) -> None:
    """Set the process's default client TLS options (over the environment's).

    Clients created afterwards use it for ``https://`` brokers; call with no
    arguments to go back to the environment and public roots.
    """
    global _default

    def path(value: str | os.PathLike[str] | None) -> str | None:
        return None if value is None else os.fspath(value)

    tls = ClientTls(path(ca_file), path(cert_file), path(key_file))
    client_context(tls)  # fail now, not at the first connection
    _default = None if tls == ClientTls() else tls


def default_tls() -> ClientTls:
    """The options :func:`configure` set, else the environment's."""
    return _default if _default is not None else ClientTls.from_env()


def default_context() -> ssl.SSLContext:
    """The context of :func:`default_tls`."""
    return client_context(default_tls())
