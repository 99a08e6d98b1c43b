"""The Anthropic Messages dialect: its own error envelope and SSE events."""

from __future__ import annotations

from collections.abc import Mapping

from inferd.api.anthropic.convert import to_chat_request
from inferd.api.anthropic.errors import anthropic_error, error_response
from inferd.api.anthropic.events import error_event
from inferd.api.anthropic.protocol import MessagesRequest
from inferd.api.prompt_text import as_list, message_text, system_text, tools_text
from inferd.http.dialect import Dialect, Endpoint, PromptRenderer
from inferd.http.errors import APIError

PATHS = ("/v1/messages", "/messages")


def messages_text(body: Mapping) -> str:
    messages = "".join(message_text(m) for m in as_list(body.get("messages")))
    return tools_text(body.get("tools")) + system_text(body.get("system")) + messages


def messages_prompt_ids(renderer: PromptRenderer, body: Mapping) -> list[int]:
    return renderer.chat(to_chat_request(MessagesRequest.model_validate(body)))


def respond(err: APIError):
    return error_response(anthropic_error(err))


DIALECT = Dialect(
    name="anthropic",
    routes="inferd.api.anthropic.routes",
    path_prefixes=PATHS,
    endpoints=(
        *(Endpoint(p, routing_text=messages_text, prompt_ids=messages_prompt_ids) for p in PATHS),
        *(Endpoint(f"{p}/count_tokens") for p in PATHS),
        # Message batches are kept by the worker that took them.
        Endpoint("/v1/messages/batches", methods=("GET", "POST"), stores_response=True),
        Endpoint("/v1/messages/batches/{batch_id}", methods=("GET", "DELETE")),
        Endpoint("/v1/messages/batches/{batch_id}/cancel"),
        Endpoint("/v1/messages/batches/{batch_id}/results", methods=("GET",)),
    ),
    error_response=respond,
    stream_error=error_event,
)
