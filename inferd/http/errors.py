"""Errors in the OpenAI envelope: {"error": {"message", "type", "param", "code"}}.

    APIError                    raised anywhere in a handler; carries status + type
      ├─ BadRequest (400)       invalid_request_error
      │   └─ ContextSizeExceeded  exceed_context_size_error, with n_prompt_tokens and n_ctx
      ├─ Unauthorized (401)     authentication_error
      ├─ NotFound (404)         not_found_error
      ├─ PayloadTooLarge (413)
      ├─ UnsupportedMediaType (415)
      └─ ServiceUnavailable (503) with Retry-After

ValueErrors (validation) become 400. The layers above translate their own
exceptions into these before they reach HTTP (the chat core does so for the
engine's). Anything else becomes a 500 whose message never carries internals.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger(__name__)

MAX_MESSAGE = 1024


class APIError(Exception):
    status = 500
    type = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, headers: dict | None = None,
                 fields: dict | None = None):
        super().__init__(message)
        self.message = message[:MAX_MESSAGE]
        self.param = param
        self.code = code
        self.headers = headers
        self.fields = fields or {}  # more members of the error object


class BadRequest(APIError):
    status, type = 400, "invalid_request_error"


class ContextSizeExceeded(BadRequest):
    """The prompt (plus max_tokens) does not fit the context. llama-server's type and
    fields, which clients read to trim a conversation; OpenAI's code."""

    type = "exceed_context_size_error"

    def __init__(self, message: str, n_prompt_tokens: int, n_ctx: int, param: str | None = None):
        super().__init__(f"the request exceeds the available context size: {message}", param=param,
                         code="context_length_exceeded", fields={"n_prompt_tokens": n_prompt_tokens, "n_ctx": n_ctx})


class Unauthorized(APIError):
    status, type = 401, "authentication_error"


class NotFound(APIError):
    status, type = 404, "not_found_error"


class PayloadTooLarge(APIError):
    status, type = 413, "invalid_request_error"


class UnsupportedMediaType(APIError):
    status, type = 415, "invalid_request_error"


class ServiceUnavailable(APIError):
    status, type = 503, "service_unavailable"


def error_body(message: str, type_: str, param: str | None = None, code: str | int | None = None,
               fields: dict | None = None) -> dict:
    return {"error": {"message": message[:MAX_MESSAGE], "type": type_, "param": param, "code": code, **(fields or {})}}


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(error_body(err.message, err.type, err.param, err.code, err.fields), status_code=err.status,
                        headers=err.headers)


class HTTPStatusError(APIError):
    """An error Starlette or FastAPI raised with a status of its own (404, 405, an unparsable body)."""

    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message, headers=headers)
        self.status = status
        self.type = {404: "not_found_error"}.get(status, "invalid_request_error" if status < 500 else "server_error")


def unreadable_body(cause: BaseException) -> str:
    """Why a request body could not be parsed as JSON, in words that say what to change."""
    if isinstance(cause, RecursionError):
        return "request body is not valid JSON: it is nested too deeply"
    if isinstance(cause, UnicodeDecodeError):
        return f"request body is not valid UTF-8: {cause.reason} at byte {cause.start}"
    return f"request body is not valid JSON: {cause}"


def to_api_error(exc: Exception) -> APIError:
    """An exception's HTTP meaning."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, StarletteHTTPException):
        # FastAPI chains the parser's own error to its generic "error parsing the body".
        cause = exc.__cause__
        message = unreadable_body(cause) if exc.status_code == 400 and cause is not None else str(exc.detail)
        return HTTPStatusError(exc.status_code, message, headers=exc.headers)
    if isinstance(exc, ValueError):
        return BadRequest(str(exc), param=getattr(exc, "field", None))
    log.exception("unexpected error", exc_info=exc)
    return APIError("internal server error; see the server log")


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = []
    for part in first.get("loc", ()):
        if part == "body":
            continue
        if isinstance(part, str) and (part in _TYPE_TAGS or "[" in part or part[:1].isupper()):
            break  # a union branch's name, not a field: stop at the field it belongs to
        loc.append(str(part))
    if first.get("type") == "json_invalid":
        return f"request body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}", None
    where = ".".join(loc) or "body"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg')}{more}", where


async def _expected_error(_: Request, exc: Exception):
    return error_response(to_api_error(exc))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api(_: Request, exc: APIError):
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        message, param = validation_message(exc)
        return error_response(BadRequest(message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        return error_response(to_api_error(exc))

    # Expected failures get their own handlers: the catch-all below is
    # Starlette's last resort, which logs a traceback and drops the connection.
    app.add_exception_handler(ValueError, _expected_error)

    @app.exception_handler(json.JSONDecodeError)
    async def _json(_: Request, exc: json.JSONDecodeError):
        return error_response(BadRequest(f"request body is not valid JSON: {exc}"))

    @app.exception_handler(Exception)
    async def _any(_: Request, exc: Exception):
        return error_response(to_api_error(exc))
