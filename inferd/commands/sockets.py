"""Listening on several addresses at once (`--host 127.0.0.1,::1`, as
llama-server takes them): one TCP socket per address, all on one port."""

from __future__ import annotations

import ipaddress
import socket


def hosts_of(host: str) -> list[str]:
    """The addresses in a comma-separated --host; refuses a Unix socket among TCP addresses."""
    hosts = [h.strip() for h in host.split(",") if h.strip()]
    if not hosts:
        raise ValueError("--host is empty; give an address such as 127.0.0.1")
    if len(hosts) > 1 and any(h.endswith(".sock") for h in hosts):
        raise ValueError(f"--host {host}: a Unix socket path cannot be listed with other addresses; "
                         "give one socket path, or TCP addresses only")
    return hosts


def bind_all(hosts: list[str], port: int) -> list[socket.socket]:
    """Bound, listening sockets; with port 0 the first address picks the port and the rest take it.
    Raises OSError naming the address that could not be bound (the ones bound so far are closed)."""
    bound: list[socket.socket] = []
    try:
        for host in hosts:
            family = socket.AF_INET6 if _is_ipv6(host) else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # "::" beside "0.0.0.0" must not clash
            try:
                sock.bind((host, port))
            except OSError as error:
                raise OSError(error.errno, f"cannot listen on {host}:{port}: {error.strerror}") from None
            sock.listen(2048)
            sock.set_inheritable(True)
            port = port or sock.getsockname()[1]
    except BaseException:
        for sock in bound:
            sock.close()
        raise
    return bound


def _is_ipv6(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).version == 6
    except ValueError:
        return False
