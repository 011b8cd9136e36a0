"""The HTTP server: uvicorn serving the app through the listener's own protocol.

:func:`build_config` gives uvicorn the app (``create_app``) and a protocol class of
this listener's own: :class:`~app.api.zerocopy_protocol.ZeroCopyHttpToolsProtocol`
(binary fetches leave with ``os.sendfile``) or, with ``LOGBUS_ZEROCOPY=0``,
:class:`~app.api.zerocopy_protocol.PlainHttpToolsProtocol`. Both are
:class:`~app.api.protocol.GuardedHttpToolsProtocol`s (the listener's limits, the memory
budget for request bodies) answering each request with its head and body in one write
(:mod:`app.api.single_write`). The default loop stays uvicorn's ``auto`` (uvloop when
installed). :func:`run` serves until SIGTERM or SIGINT and exits cleanly.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import ssl
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import uvicorn

from app.api.limits import ConnectionCounter, ListenerLimits
from app.api.memory import tune_allocator
from app.api.zerocopy_protocol import PlainHttpToolsProtocol, ZeroCopyHttpToolsProtocol

if TYPE_CHECKING:
    from app.config import Settings

# uvicorn configures this logger; ours would print nothing without extra setup.
logger = logging.getLogger("uvicorn.error")

# Requests still running at shutdown are cut after this (long polls are answered at once:
# LogbusServer.shutdown).
GRACEFUL_SHUTDOWN_SECONDS = 5


def _zerocopy_from_env() -> bool:
    return os.environ.get("LOGBUS_ZEROCOPY", "1").strip().lower() not in {"0", "false", "no", "off"}


# uvicorn's own keepalive (a ping every 20 s, 20 s for its pong) where the session timeout
# leaves room for it.
WS_PING_SECONDS = 20.0


def ws_keepalive(settings: Settings) -> tuple[float, float]:
    """(ping interval, pong timeout) in seconds for WebSocket connections.

    A group member over ``/ws/subscribe`` is heartbeated by the broker for as
    long as its socket lives, so the socket's liveness is the member's: a
    frozen client (process stopped, host gone, network cut without a reset)
    must lose its socket, and so its partitions, within the group's session
    timeout, as an HTTP member that stops heartbeating does. Pings are how a
    silent socket proves liveness; a client that answers no ping within the
    interval plus the timeout (at most the session timeout) is cut with 1011.
    Frequent pings with a long wait for each pong: a pong held up by a busy
    client or broker loop does not cost a live member its partitions.
    """
    session = settings.group_consumer_session_timeout_ms / 1000
    return min(WS_PING_SECONDS, session / 4), min(WS_PING_SECONDS, session * 3 / 4)


class ServeOptions(TypedDict, total=False):
    """How :func:`build_config` and :func:`run` serve, beyond the settings."""

    # None: on unless LOGBUS_ZEROCOPY turns it off (:func:`_zerocopy_from_env`).
    zerocopy: bool | None
    # uvicorn's event loop ("auto": uvloop when installed), log level and access log.
    loop: str
    log_level: str
    access_log: bool


def build_config(settings: Settings, **options: Unpack[ServeOptions]) -> uvicorn.Config:
    """A uvicorn config serving ``create_app(settings)`` with zero-copy unless disabled.

    Raises:
        ValueError: a non-loopback bind with no authentication and no
            ``allow_unauthenticated_network`` (:meth:`Settings.check_network_exposure`).
    """
    from app.api import create_app

    settings.check_network_exposure()
    # Large freed blocks go back to the system at once (app/api/memory.py).
    tune_allocator()

    zerocopy = options.get("zerocopy")
    if zerocopy is None:
        zerocopy = _zerocopy_from_env()
    base = ZeroCopyHttpToolsProtocol if zerocopy else PlainHttpToolsProtocol
    limits = ListenerLimits.from_settings(settings)
    if limits.max_connections < settings.max_connections:
        logger.warning(
            "max_connections lowered to %d: half of the file-descriptor limit (the rest is "
            "for segment files)",
            limits.max_connections,
        )
    app = create_app(settings)
    # One counter per listener, bound to a protocol class of its own, with the app's
    # memory budget (request bodies are reserved by the protocol, before the app).
    protocol = type(
        base.__name__,
        (base,),
        {"counter": ConnectionCounter(limits), "memory": app.state.logbus.memory},
    )
    ping_interval, ping_timeout = ws_keepalive(settings)
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol,
        loop=options.get("loop", "auto"),
        lifespan="on",
        access_log=options.get("access_log", False),
        log_level=options.get("log_level", "info"),
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
        # uvicorn hands it to loop.call_later, which takes float seconds.
        timeout_keep_alive=limits.idle_timeout_s,  # type: ignore[arg-type]
        server_header=False,
        ws_ping_interval=ping_interval,
        ws_ping_timeout=ping_timeout,
        # Per-socket zlib state and per-socket compression of shared frames (config.py).
        ws_per_message_deflate=settings.ws_compression,
        **tls_options(settings),
    )


_CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def tls_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's TLS arguments from the ``ssl_*`` settings (empty: plaintext).

    Over TLS, :class:`ZeroCopyHttpToolsProtocol` offers no sendfile extension
    (``is_ssl``), so a binary fetch is read from the segment and written
    through the SSL transport: Python's :mod:`ssl` cannot hand encryption to
    the kernel (kTLS), so there is nothing sendfile could skip.
    """
    if not settings.tls:
        return {}
    return {
        "ssl_certfile": str(settings.ssl_certfile),
        "ssl_keyfile": str(settings.ssl_keyfile),
        "ssl_ca_certs": None if settings.ssl_ca_file is None else str(settings.ssl_ca_file),
        "ssl_cert_reqs": _CLIENT_AUTH[settings.ssl_client_auth],
    }


def settle_collector(young_threshold: int) -> None:
    """After startup: freeze what exists (the app, its routes, the logs' state: never
    garbage) out of the collector, and raise the young generation's threshold to
    ``young_threshold`` (0: Python's defaults kept).

    Why: requests make no reference cycles, but the objects of the requests in flight
    (64 connections' worth) count as allocations; at Python's 700 a young collection ran
    every ~70 requests and promoted them, and every few seconds a full collection walked
    the whole heap (~110,000 objects, ~75 ms with the event loop stopped): the produce
    p99 under load. Frozen, a full collection walks only what was promoted since
    (~6 ms); at 10,000 a keyed one-record load made no collection at all in 8 s.
    Process-wide: called by :class:`LogbusServer` in the served process only.
    """
    gc.collect()
    gc.freeze()
    if young_threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(young_threshold, older, oldest)


class LogbusServer(uvicorn.Server):
    """uvicorn's server that settles the collector once started (:func:`settle_collector`)
    and answers the long polls at once when it stops (:meth:`shutdown`)."""

    def __init__(self, config: uvicorn.Config, young_threshold: int) -> None:
        super().__init__(config)
        self._young_threshold = young_threshold

    async def startup(self, sockets: list[Any] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            settle_collector(self._young_threshold)

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        """Release every long poll (HTTP and Kafka fetches, WebSocket subscriptions: they
        answer with what they have, as Kafka completes its delayed fetches when it stops),
        then uvicorn's shutdown. uvicorn waits up to ``GRACEFUL_SHUTDOWN_SECONDS`` for the
        requests in flight before it runs the app's lifespan shutdown, which released
        them only then: one parked fetch held every stop for those 5 s and was then cut
        without an answer. Nothing awaits in between, so no request starts after the
        release (one that registers a wait later finds the waiters closed and answers)."""
        app_state = getattr(self.config.app, "state", None)
        logbus_state = getattr(app_state, "logbus", None)
        if logbus_state is not None:
            logbus_state.waiters.close()
        await super().shutdown(sockets)


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def run(settings: Settings, **options: Unpack[ServeOptions]) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly (LogManager writes .clean_shutdown).

    uvicorn catches both signals, drains connections and runs the lifespan
    shutdown; afterwards it re-raises the signal against the handler that was
    installed before it started. That handler is ours and exits with status 0,
    so a requested stop is a success, not a death by signal. It also covers a
    signal that arrives while the app is still being built.
    """
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)
    zerocopy = options.get("zerocopy")
    if zerocopy is None:
        zerocopy = _zerocopy_from_env()
    try:
        settings.check_network_exposure()
    except ValueError as exc:
        print(f"logbus: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    served: ServeOptions = {**options, "zerocopy": zerocopy}
    config = build_config(settings, **served)
    logger.info(
        "logbus broker %d serving %s on %s (zero-copy fetch %s)",
        settings.broker_id,
        settings.data_dir,
        settings.url,
        "off: TLS" if settings.tls else "on" if zerocopy else "off",
    )
    server = LogbusServer(config, settings.gc_young_threshold)
    server.run()
    if not server.started:
        # Startup failed (port in use, recovery error): uvicorn already logged why.
        raise SystemExit(3)
