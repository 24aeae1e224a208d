"""Listen addresses of rsupd's HTTP surfaces (metrics, dashboard): HOST:PORT, loopback."""

from __future__ import annotations

import ipaddress


def split(value: str) -> tuple[str, int] | None:
    """HOST:PORT -> (host, port): 127.0.0.1:8765, [::1]:8765, or :8765 for 127.0.0.1;
    None when it is not of that form."""
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
