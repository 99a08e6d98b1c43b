"""ASGI middleware: what a request body may be, checked before any route parses a byte.

Every path takes JSON up to --max-body-size. A path in the upload table
takes multipart/form-data instead, up to its own limit (the audio routes:
--max-audio-size). Anything else is a 415; a body past its limit a 413.
A body declared as another type (curl -d sends form-urlencoded) is read and
taken as JSON when it parses as JSON, as llama-server, Ollama and vLLM do.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from starlette.responses import Response

from inferd.http.errors import APIError, PayloadTooLarge, UnsupportedMediaType

# Answers an error for a path in the envelope of the dialect the path belongs to.
ErrorResponder = Callable[[str, APIError], Response]

_BODY_METHODS = {b"POST", b"PUT", b"PATCH"}
MULTIPART = b"multipart/form-data"
# Room for the form's other fields and part headers around a file of the full size.
FORM_OVERHEAD = 64 * 1024


@dataclass(frozen=True)
class UploadLimit:
    """A path that takes multipart/form-data uploads of up to `max_size` bytes."""

    max_size: int
    option: str  # the flag that sets it, named in the 413

    @classmethod
    def from_config(cls, config, field: str) -> UploadLimit:
        return cls(getattr(config, field), "--" + field.replace("_", "-"))


@dataclass(frozen=True)
class _Rule:
    multipart: bool
    max_size: int
    option: str


class BodyLimits:
    def __init__(self, app, max_body_size: int, respond: ErrorResponder,
                 uploads: Mapping[str, UploadLimit] | None = None):
        self.app = app
        self.json = _Rule(False, max_body_size, "--max-body-size")
        self.uploads = {path: _Rule(True, u.max_size + FORM_OVERHEAD, u.option) for path, u in (uploads or {}).items()}
        self.respond = respond

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"].encode() not in _BODY_METHODS:
            return await self.app(scope, receive, send)
        rule = self.uploads.get(scope["path"], self.json)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        has_body = (length is not None and length != b"0") or b"transfer-encoding" in headers
        sniff = False  # a body declared as something else, taken if it parses as JSON
        if has_body:
            media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if rule.multipart and media != MULTIPART:
                err = UnsupportedMediaType("send this request as multipart/form-data (the file and the other fields as form parts)")
                return await self._reject(scope, receive, send, err)
            sniff = not rule.multipart and media != b"application/json" and not media.endswith(b"+json")
        if length is not None and length.isdigit() and int(length) > rule.max_size:
            return await self._reject(scope, receive, send, PayloadTooLarge(self._too_large(rule)))
        if length is not None and not sniff:
            return await self.app(scope, receive, send)  # the server enforces the declared length
        # A chunked body has no declared size: read it here, up to the limit, then replay it.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > rule.max_size:
                return await self._reject(scope, receive, send, PayloadTooLarge(self._too_large(rule)))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if sniff:
            # A large body is parsed on a worker thread: the event loop keeps answering meanwhile.
            is_json = _is_json(body) if len(body) < 65536 else await asyncio.to_thread(_is_json, body)
            if not is_json:
                err = UnsupportedMediaType("send the body as JSON with Content-Type: application/json")
                return await self._reject(scope, receive, send, err)
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"content-type"]
                     + [(b"content-type", b"application/json")]}
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    @staticmethod
    def _too_large(rule: _Rule) -> str:
        if rule.multipart:
            return f"upload exceeds {rule.max_size - FORM_OVERHEAD} bytes ({rule.option})"
        return f"request body exceeds {rule.max_size} bytes ({rule.option})"

    async def _reject(self, scope, receive, send, err) -> None:
        await self.respond(scope["path"], err)(scope, receive, send)


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except RecursionError:
        return True  # JSON nested too deeply: the route says so in its dialect's words
    except ValueError:  # UnicodeDecodeError included
        return False
    return True
