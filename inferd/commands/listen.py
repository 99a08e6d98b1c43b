"""Where a server listens, as `serve` and `router` both judge it."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """Only this machine can connect (a loopback address or a Unix socket)."""
    if host == "localhost" or host.endswith(".sock"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
