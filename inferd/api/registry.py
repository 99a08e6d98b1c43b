"""Every dialect inferd speaks. Adding one: a package under `inferd.api`
with a `dialect` module, and one line here.

The server mounts each dialect's routes; the router forwards each one's
endpoints; errors raised before a route runs (auth, body limits, routing)
answer in the envelope of the dialect that owns the path, OpenAI's by default.
"""

from __future__ import annotations

from starlette.responses import Response

from inferd.api.anthropic.dialect import DIALECT as ANTHROPIC
from inferd.api.audio.dialect import DIALECT as OPENAI_AUDIO
from inferd.api.llamacpp.dialect import DIALECT as LLAMACPP
from inferd.api.ollama.dialect import DIALECT as OLLAMA
from inferd.api.openai.dialect import DIALECT as OPENAI
from inferd.api.responses.dialect import DIALECT as RESPONSES
from inferd.http.body_limits import UploadLimit
from inferd.http.dialect import Dialect, Endpoint
from inferd.http.errors import APIError

DIALECTS: tuple[Dialect, ...] = (OPENAI, OPENAI_AUDIO, ANTHROPIC, RESPONSES, LLAMACPP, OLLAMA)


def dialect_for_path(path: str) -> Dialect:
    return next((d for d in DIALECTS if d.owns(path)), OPENAI)


def error_response_for_path(path: str, err: APIError) -> Response:
    return dialect_for_path(path).error_response(err)


def endpoints() -> dict[str, Endpoint]:
    """Every forwarded client path (as a route template) and what it is."""
    return {e.path: e for d in DIALECTS for e in d.endpoints}


def upload_limits(config) -> dict[str, UploadLimit]:
    """The paths that take multipart/form-data uploads, each bounded by the
    config field its endpoint names (`Endpoint.upload_limit`)."""
    return {e.path: UploadLimit.from_config(config, e.upload_limit)
            for d in DIALECTS for e in d.endpoints if e.upload_limit}
