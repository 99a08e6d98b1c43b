"""Which headers cross the router, each way.

Hop-by-hop headers describe one connection and never cross a proxy. The
router also drops what it sets itself: Host and Content-Length (recomputed),
Accept-Encoding (workers answer uncompressed, so bytes pass through as they
are), and its own routing header. Client keys for the router are not the
workers' keys: with --worker-api-key they are replaced; with router keys of
its own they are dropped; with neither they pass through unchanged. A
caller the router's keys identified is named to the worker in
`x-inferd-on-behalf-of` (whose files and jobs these are, `api/job_access.py`),
with its model scopes, if any, in `x-inferd-on-behalf-scopes` (a JSON list:
its batch items are held to them), and its rate limits, if any, in
`x-inferd-on-behalf-limits` (a JSON object); a client's own such headers
never cross.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection",
    b"te", b"trailer", b"transfer-encoding", b"upgrade",
})
ON_BEHALF_HEADER = b"x-inferd-on-behalf-of"
ON_BEHALF_SCOPES = b"x-inferd-on-behalf-scopes"
ON_BEHALF_LIMITS = b"x-inferd-on-behalf-limits"
_SET_BY_ROUTER = frozenset({b"host", b"content-length", b"accept-encoding", b"x-worker-id",
                            b"x-worker-instance-id", ON_BEHALF_HEADER, ON_BEHALF_SCOPES,
                            ON_BEHALF_LIMITS})
_KEYS = frozenset({b"authorization", b"x-api-key"})

WORKER_HEADER = b"x-inferd-worker"  # on every forwarded answer: which worker produced it


def _named_in_connection(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    """`Connection: close, x-foo` makes x-foo hop-by-hop too."""
    named = set()
    for name, value in headers:
        if name.lower() == b"connection":
            named |= {part.strip().lower() for part in value.split(b",") if part.strip()}
    return named


def request_headers(client: list[tuple[bytes, bytes]], worker_api_key: str | None,
                    router_has_keys: bool, on_behalf_of: str | None = None,
                    scopes: tuple[str, ...] = (), limits: dict | None = None) -> list[tuple[bytes, bytes]]:
    """`on_behalf_of`: the name of the router's key that sent the request; `scopes`: the models it may use;
    `limits`: its rate limits (those set)."""
    drop = HOP_BY_HOP | _SET_BY_ROUTER | _named_in_connection(client)
    if worker_api_key or router_has_keys:
        drop |= _KEYS
    out = [(n, v) for n, v in client if n.lower() not in drop]
    if worker_api_key:
        out.append((b"authorization", b"Bearer " + worker_api_key.encode()))
    if on_behalf_of:
        out.append((ON_BEHALF_HEADER, on_behalf_of.encode()))
        if scopes:
            out.append((ON_BEHALF_SCOPES, json.dumps(list(scopes)).encode()))
        if limits:
            out.append((ON_BEHALF_LIMITS, json.dumps(limits).encode()))
    out.append((b"accept-encoding", b"identity"))
    return out


def response_headers(upstream: list[tuple[bytes, bytes]], worker_id: str,
                     content_length: int | None = None) -> list[tuple[bytes, bytes]]:
    # The router's own server adds Date and Server; the worker's would repeat them.
    drop = HOP_BY_HOP | {b"content-length", b"date", b"server"} | _named_in_connection(upstream)
    out = [(n.lower(), v) for n, v in upstream if n.lower() not in drop]
    out.append((WORKER_HEADER, worker_id.encode()))
    if content_length is not None:
        out.append((b"content-length", str(content_length).encode()))
    return out
