"""What one API dialect tells the rest of inferd about itself.

A dialect package (`inferd.api.<name>`) exports one `Dialect` record from its
`dialect` module. The server mounts its routes; the router forwards its
endpoints, answers errors in its envelope and ends a broken stream with its
terminal event; both learn its paths from here and nowhere else.

The record holds no handler: `routes` names the module whose `router` the
server mounts, so reading a record never imports the engine (the router
holds no weights and must not load torch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from starlette.responses import Response

from inferd.http.errors import APIError, error_response
from inferd.http.sse import openai_error_event


class PromptRenderer(Protocol):
    """What a dialect needs to turn a request body into prompt token ids
    without a model: the tokenizer and the chat template (the router's
    precise mode holds one)."""

    def encode(self, text: str) -> list[int]: ...

    def chat(self, request) -> list[int]:
        """Token ids of a chat request (`serving.chat_request.ChatCompletionRequest`) as a worker renders it."""


@dataclass(frozen=True)
class Endpoint:
    """One client path the router forwards to a worker."""

    path: str
    methods: tuple[str, ...] = ("POST",)
    # Ollama streams unless told not to; every other dialect only when asked.
    streams_unless_false: bool = False
    # The prompt as text for locality routing (see `api.prompt_text`).
    routing_text: Callable[[Mapping], str] | None = None
    # The prompt as a worker's token ids, for precise routing; None when unknown.
    prompt_ids: Callable[[PromptRenderer, Mapping], list[int] | None] | None = None
    # The prompt may be sent as token ids: routing can use them without a tokenizer.
    token_prompt: bool = False
    # The answer may be stored on the worker that made it; later reads must go there.
    stores_response: bool = False
    # The config field bounding this path's multipart/form-data uploads (as
    # `http.body_limits` reads it); None: the body is JSON.
    upload_limit: str | None = None


def openai_stream_error(err: APIError, last_sequence: int | None) -> str:
    return openai_error_event(err)


@dataclass(frozen=True)
class Dialect:
    name: str
    routes: str  # module whose `router` (a FastAPI APIRouter) the server mounts
    # Paths whose errors (auth, body limits, routing) use this dialect's
    # envelope: each path and everything below it.
    path_prefixes: tuple[str, ...]
    endpoints: tuple[Endpoint, ...] = ()
    framing: Literal["sse", "ndjson"] = "sse"
    error_response: Callable[[APIError], Response] = error_response
    # The event that ends a stream cut by an error, in the dialect's framing;
    # `last_sequence` is the last numbered event sent, for dialects that number them.
    stream_error: Callable[[APIError, int | None], str] = openai_stream_error

    def owns(self, path: str) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in self.path_prefixes)
