"""Errors raised before routing (auth, body limits) in the envelope of the
dialect the path belongs to, so every client parses its own error shape."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from inferd.server.errors import APIError, error_response

_ANTHROPIC_PATHS = ("/v1/messages", "/messages")
_OLLAMA_PREFIX = "/api/"


def error_response_for_path(path: str, err: APIError) -> JSONResponse:
    if path in _ANTHROPIC_PATHS or path.startswith(tuple(p + "/" for p in _ANTHROPIC_PATHS)):
        from inferd.api.anthropic.errors import anthropic_error, error_response as anthropic_response

        return anthropic_response(anthropic_error(err))
    if path.startswith(_OLLAMA_PREFIX):
        return JSONResponse({"error": err.message}, status_code=err.status, headers=err.headers)
    return error_response(err)
