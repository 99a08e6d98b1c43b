"""Precise mode: a request's prompt as the token ids an inferd worker will
compute, so its KV block hashes can be matched against what workers hold.

Only the tokenizer and chat template are loaded (no weights), and the prompt
is rendered by the worker's own functions: OpenAI chat and Anthropic
messages through the chat template, completions by encoding the prompt.
Other routes, and anything that fails to render, give None and are routed
by the precise policy's fallback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from types import SimpleNamespace

from inferd.api.anthropic.convert import to_chat_request as anthropic_to_chat
from inferd.api.anthropic.protocol import MessagesRequest
from inferd.api.openai.chat import render_chat_prompt
from inferd.api.openai.chat_constraints import tool_choice_mode
from inferd.api.openai.protocol import ChatCompletionRequest
from inferd.chat.template import chat_template_for
from inferd.models.loader import resolve_model_path
from inferd.models.tokenizer import Tokenizer, load_tokenizer

log = logging.getLogger(__name__)

_CHAT = ("/v1/chat/completions", "/chat/completions")
_MESSAGES = ("/v1/messages", "/messages")
_COMPLETIONS = ("/v1/completions", "/completions")


class PromptTokenizer:
    """`tokenize(path, body)` for `routing_request`: token ids or None, never raises."""

    def __init__(self, tokenizer: Tokenizer, chat_template: str | None = None):
        self.tokenizer = tokenizer
        self.render_state = SimpleNamespace(template=chat_template_for(tokenizer, chat_template))

    @classmethod
    def for_model(cls, model: str | None) -> PromptTokenizer:
        """`model` as `inferd serve --model` takes it (default: the bundled model)."""
        _, path = resolve_model_path(model)
        return cls(load_tokenizer(path))

    def __call__(self, path: str, body: Mapping) -> list[int] | None:
        route = path.split("?", 1)[0].rstrip("/")
        try:
            if route in _CHAT:
                return self.chat_ids(ChatCompletionRequest.model_validate(body))
            if route in _MESSAGES:
                return self.chat_ids(anthropic_to_chat(MessagesRequest.model_validate(body)))
            if route in _COMPLETIONS:
                prompt = body.get("prompt")
                prompt = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else prompt
                return self.tokenizer.encode(prompt) if isinstance(prompt, str) else None
        except Exception as e:  # an invalid request: the worker will say what is wrong with it
            log.debug("no prompt tokens for %s: %s", route, e)
        return None

    def chat_ids(self, req: ChatCompletionRequest) -> list[int]:
        # As submit_chat does: tools are part of the prompt unless tool_choice is none.
        tools = req.tools if tool_choice_mode(req) != "none" else []
        return self.tokenizer.encode(render_chat_prompt(self.render_state, req, tools=tools))
