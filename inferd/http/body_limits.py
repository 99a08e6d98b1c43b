"""ASGI middleware: JSON bodies only (415), and no body past --max-body-size (413),
checked before any route parses a byte."""

from __future__ import annotations

from inferd.http.auth import ErrorResponder
from inferd.http.errors import PayloadTooLarge, UnsupportedMediaType

_BODY_METHODS = {b"POST", b"PUT", b"PATCH"}


class BodyLimits:
    def __init__(self, app, max_body_size: int, respond: ErrorResponder):
        self.app = app
        self.max_body_size = max_body_size
        self.respond = respond

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"].encode() not in _BODY_METHODS:
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        has_body = (length is not None and length != b"0") or b"transfer-encoding" in headers
        if has_body:
            media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if media != b"application/json" and not media.endswith(b"+json"):
                err = UnsupportedMediaType("send the body as JSON with Content-Type: application/json")
                return await self._reject(scope, receive, send, err)
        if length is not None and length.isdigit() and int(length) > self.max_body_size:
            return await self._reject(scope, receive, send, PayloadTooLarge(self._too_large()))
        if length is not None:
            return await self.app(scope, receive, send)  # the server enforces the declared length
        # A chunked body has no declared size: read it here, up to the limit, then replay it.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body_size:
                return await self._reject(scope, receive, send, PayloadTooLarge(self._too_large()))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _too_large(self) -> str:
        return f"request body exceeds {self.max_body_size} bytes (--max-body-size)"

    async def _reject(self, scope, receive, send, err) -> None:
        await self.respond(scope["path"], err)(scope, receive, send)
