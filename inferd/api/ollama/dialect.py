"""Ollama's dialect: paths under /api, errors as {"error": "..."}, streams
as NDJSON (on by default) ending with an error line when cut."""

from __future__ import annotations

import json
from collections.abc import Mapping

from fastapi.responses import JSONResponse

from inferd.api.prompt_text import as_list, chat_messages_text, digest, system_text
from inferd.http.dialect import Dialect, Endpoint
from inferd.http.errors import APIError


def generate_text(body: Mapping) -> str:
    images = "".join(f"[image:{digest(i)}]" for i in as_list(body.get("images")))
    prompt = body.get("prompt")
    return system_text(body.get("system")) + images + (prompt if isinstance(prompt, str) else "")


def respond(err: APIError) -> JSONResponse:
    return JSONResponse({"error": err.message}, status_code=err.status, headers=err.headers)


def error_line(err: APIError, last_sequence: int | None = None) -> str:
    return json.dumps({"error": err.message}, ensure_ascii=False) + "\n"


DIALECT = Dialect(
    name="ollama",
    routes="inferd.api.ollama.routes",
    path_prefixes=("/api",),
    endpoints=(
        Endpoint("/api/chat", streams_unless_false=True, routing_text=chat_messages_text),
        Endpoint("/api/generate", streams_unless_false=True, routing_text=generate_text),
        Endpoint("/api/embed"), Endpoint("/api/embeddings"), Endpoint("/api/show"),
        Endpoint("/api/version", methods=("GET",)),
    ),
    framing="ndjson",
    error_response=respond,
    stream_error=error_line,
)
