"""Errors in Anthropic's envelope, {"type": "error", "error": {"type", "message"}},
with its status codes; a route class applies it to every error its routes raise."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from inferd.http.errors import APIError, BadRequest, validation_message, to_api_error

# Anthropic's documented status for an overloaded service; clients retry it.
OVERLOADED = 529

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error",
          429: "rate_limit_error", 503: "overloaded_error"}


class AnthropicError(Exception):
    def __init__(self, status: int, type_: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.type, self.message, self.headers = status, type_, message, headers


def anthropic_error(err: APIError) -> AnthropicError:
    type_ = _TYPES.get(err.status, "api_error")
    status = OVERLOADED if err.code == "queue_full" else err.status
    return AnthropicError(status, type_, err.message, err.headers)


def error_envelope(err: AnthropicError) -> dict:
    return {"type": "error", "error": {"type": err.type, "message": err.message}}


def error_response(err: AnthropicError) -> JSONResponse:
    return JSONResponse(error_envelope(err), status_code=err.status, headers=err.headers)


def as_anthropic(exc: Exception) -> AnthropicError:
    if isinstance(exc, RequestValidationError):
        message, param = validation_message(exc)
        return anthropic_error(BadRequest(message, param=param))
    return anthropic_error(to_api_error(exc))


class AnthropicRoute(APIRoute):
    """Answers every error raised while handling the request in Anthropic's
    envelope instead of the server-wide OpenAI one."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                return error_response(as_anthropic(exc))

        return handle
