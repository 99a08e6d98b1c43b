"""Precise mode: a request's prompt as the token ids an inferd worker will
compute, so its KV block hashes can be matched against what workers hold.

Only the tokenizer and chat template are loaded (no weights), and each
dialect renders its own prompt (`Endpoint.prompt_ids`) through the chat
core's functions, as a worker does. Other routes, and anything that fails
to render, give None and are routed by the precise policy's fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from inferd.chat.template import chat_template_for
from inferd.models.paths import resolve_model_path
from inferd.models.tokenizer import Tokenizer, load_tokenizer
from inferd.router.routing_key import endpoint_for
from inferd.serving.chat_prompt import submitted_prompt_ids
from inferd.serving.chat_request import ChatCompletionRequest

log = logging.getLogger(__name__)


class PromptTokenizer:
    """`tokenize(path, body)` for `routing_request`: token ids or None, never raises.
    Also the `PromptRenderer` the dialects render with."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str | None = None):
        self.tokenizer = tokenizer
        self.template = chat_template_for(tokenizer, chat_template)

    @classmethod
    def for_model(cls, model: str | None) -> PromptTokenizer:
        """`model` as `inferd serve --model` takes it (default: the bundled model)."""
        _, path = resolve_model_path(model)
        return cls(load_tokenizer(path))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def chat(self, request: ChatCompletionRequest) -> list[int]:
        return submitted_prompt_ids(self.template, self.tokenizer, request)

    def __call__(self, path: str, body: Mapping) -> list[int] | None:
        endpoint = endpoint_for(path)
        if endpoint is None or endpoint.prompt_ids is None:
            return None
        try:
            return endpoint.prompt_ids(self, body)
        except Exception as e:  # an invalid request: the worker will say what is wrong with it
            log.debug("no prompt tokens for %s: %s", path, e)
        return None
