"""API keys (`--api-key`, `--api-key-file`, INFERD_API_KEY).

With keys configured, every route but health needs one, sent as
`Authorization: Bearer <key>` (OpenAI clients) or `x-api-key: <key>`
(Anthropic clients). Checked before routing, so an unauthenticated client
learns nothing about routes or body limits and no body is read.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable

from starlette.responses import Response

from inferd.http.errors import APIError, Unauthorized

# Answers an error for a path in the envelope of the dialect the path belongs to.
ErrorResponder = Callable[[str, APIError], Response]

HOW_TO_SEND = "send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
WEBSOCKET_POLICY_VIOLATION = 1008


class ApiKeyAuth:
    """ASGI middleware; reads the keys per request (`keys()`), so none configured means open.
    `open_paths` (health) never need a key."""

    def __init__(self, app, keys: Callable[[], Iterable[str]], open_paths: Iterable[str], respond: ErrorResponder):
        self.app = app
        self.keys = keys
        self.open_paths = frozenset(open_paths)
        self.respond = respond

    async def __call__(self, scope, receive, send):
        keys = self.keys()
        if scope["type"] not in ("http", "websocket") or not keys or scope["path"] in self.open_paths:
            return await self.app(scope, receive, send)
        sent = presented_keys(scope["headers"])
        if any(is_valid_key(key, keys) for key in sent):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": WEBSOCKET_POLICY_VIOLATION})
        message = f"invalid API key; {HOW_TO_SEND}" if sent else f"this server needs an API key; {HOW_TO_SEND}"
        err = Unauthorized(message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        await self.respond(scope["path"], err)(scope, receive, send)


def presented_keys(headers: Iterable[tuple[bytes, bytes]]) -> list[bytes]:
    """Every key the request offers, from either header."""
    keys = []
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer" and token.strip():
                keys.append(token.strip())
        elif name == b"x-api-key" and value.strip():
            keys.append(value.strip())
    return keys


def is_valid_key(candidate: bytes, keys: Iterable[str]) -> bool:
    # Compared with every key, never stopping at a match, so the time taken
    # tells nothing about how close a guess came or which key it matched.
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(candidate, key.encode())
    return matched
