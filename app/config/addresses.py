"""Listener addresses: ``HOST:PORT`` strings, wildcard and loopback hosts."""

from __future__ import annotations

import ipaddress

# Addresses that mean "every interface": bound, never advertised.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def is_loopback(host: str) -> bool:
    """True for an address (or ``localhost``) that only this machine can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as (host, port); ValueError when malformed."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
