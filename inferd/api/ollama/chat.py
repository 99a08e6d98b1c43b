"""POST /api/chat: Ollama's messages through the model's chat template."""

from __future__ import annotations

import json

from fastapi import Request

from inferd.api.ollama.models import check_model
from inferd.api.ollama.protocol import ChatRequest, Message, Think
from inferd.api.ollama.results import created_at
from inferd.api.ollama.run import Prompt, generate
from inferd.serving.chat_prompt import render_chat_prompt
from inferd.serving.chat_request import ChatCompletionRequest
from inferd.http.errors import BadRequest
from inferd.serving.state import ServerState
from inferd.serving.tokens import encode_checked, off_loop

NO_IMAGES = "this model takes text only; remove the images from the request"


def template_request(messages: list[Message], tools: list | None, think: Think | None) -> ChatCompletionRequest:
    """The messages in the shape the chat template renderer takes."""
    converted = []
    for i, m in enumerate(messages):
        if m.images:
            raise BadRequest(NO_IMAGES, param="images")
        message = {"role": m.role, "content": m.content}
        if m.thinking:
            message["reasoning_content"] = m.thinking
        if m.tool_name:
            message["name"] = m.tool_name
        if m.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{i}_{j}", "type": "function",
                 "function": {"name": c.function.name, "arguments": json.dumps(c.function.arguments)}}
                for j, c in enumerate(m.tool_calls)
            ]
        converted.append(message)
    kwargs = {} if think is None else {"enable_thinking": think is not False}
    effort = think if isinstance(think, str) else None
    return ChatCompletionRequest(messages=converted, tools=tools or None, chat_template_kwargs=kwargs or None,
                                 reasoning_effort=effort)


def chat_prompt(state: ServerState, messages: list[Message], tools: list | None, think: Think | None) -> Prompt:
    text = render_chat_prompt(state.template, template_request(messages, tools, think))
    engine = state.require_engine()
    ids = encode_checked(engine.tokenizer, text, engine.engine.max_model_len, param="messages")
    return Prompt(ids=ids, text=text, stop=list(state.template.stop), tools=bool(tools))


def _message(content: str, thinking: str | None, tool_calls: list[dict]) -> dict:
    message = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"message": message}


async def chat(state: ServerState, req: ChatRequest, raw: Request):
    check_model(state, req.model)
    state.require_engine()
    if not req.messages:  # Ollama's way to load a model: nothing to generate
        return {"model": req.model, "created_at": created_at(), **_message("", None, []),
                "done_reason": "load", "done": True}
    prompt = await off_loop(chat_prompt, state, req.messages, req.tools, req.think)
    return await generate(state, req, prompt, raw, _message)
