"""Anthropic Messages requests into chat requests (results go back in `results`)."""

from __future__ import annotations

import json
from typing import Any

from inferd.api.anthropic.protocol import (
    CountTokensRequest, ImageBlock, InputMessage, MessagesRequest, TextBlock, ThinkingBlock, ToolResultBlock,
    ToolUseBlock,
)
from inferd.serving.chat_request import ChatCompletionRequest, loop_guard_fields
from inferd.http.errors import BadRequest


def to_chat_request(req: MessagesRequest) -> ChatCompletionRequest:
    if req.max_tokens is None:
        raise BadRequest("max_tokens: Field required", param="max_tokens")
    fields: dict[str, Any] = {
        "model": req.model, "max_tokens": req.max_tokens, "stream": req.stream,
        "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k,
        "stop": req.stop_sequences or None,
    }
    fields.update(_common_fields(req))
    fields.update(loop_guard_fields(req))
    if req.thinking is not None and req.thinking.type == "enabled":
        if req.thinking.budget_tokens is None:
            raise BadRequest("thinking.budget_tokens: Field required", param="thinking.budget_tokens")
        if req.thinking.budget_tokens >= req.max_tokens:
            raise BadRequest(f"thinking.budget_tokens ({req.thinking.budget_tokens}) must be less than max_tokens "
                             f"({req.max_tokens})", param="thinking.budget_tokens")
        fields["thinking_budget_tokens"] = req.thinking.budget_tokens
    return ChatCompletionRequest(**{k: v for k, v in fields.items() if v is not None})


def to_counted_request(req: CountTokensRequest) -> ChatCompletionRequest:
    fields = {"model": req.model, **_common_fields(req)}
    return ChatCompletionRequest(**{k: v for k, v in fields.items() if v is not None})


def _common_fields(req: MessagesRequest | CountTokensRequest) -> dict[str, Any]:
    fields: dict[str, Any] = {"messages": _messages(req.system, req.messages)}
    if req.tools:
        fields["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description or "",
                                              "parameters": t.input_schema}}
            for t in req.tools
        ]
    if req.tool_choice is not None:
        fields["tool_choice"] = _tool_choice(req.tool_choice)
    if req.thinking is not None:
        # Templates that can think switch on this variable; others ignore it.
        fields["chat_template_kwargs"] = {"enable_thinking": req.thinking.type != "disabled"}
    return fields


def _tool_choice(choice) -> str | dict:
    if choice.type == "tool":
        if not choice.name:
            raise BadRequest('tool_choice of type "tool" needs the tool\'s name', param="tool_choice.name")
        return {"type": "function", "function": {"name": choice.name}}
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type]


def _messages(system, messages: list[InputMessage]) -> list[dict]:
    out: list[dict] = []
    if system:
        text = system if isinstance(system, str) else "\n".join(b.text for b in system)
        out.append({"role": "system", "content": text})
    for m in messages:
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
        elif m.role == "assistant":
            out.append(_assistant_message(m.content))
        else:
            out.extend(_user_messages(m.content))
    return out


def _assistant_message(blocks: list) -> dict:
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    reasoning = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    calls = [
        {"id": b.id, "type": "function", "function": {"name": b.name, "arguments": json.dumps(b.input)}}
        for b in blocks if isinstance(b, ToolUseBlock)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return message


def _user_messages(blocks: list) -> list[dict]:
    """Tool results become tool messages; the text around them, user messages, in order."""
    out: list[dict] = []
    parts: list[dict] = []

    def flush():
        if parts:
            out.append({"role": "user", "content": list(parts)})
            parts.clear()

    for b in blocks:
        if isinstance(b, ToolResultBlock):
            flush()
            out.append({"role": "tool", "tool_call_id": b.tool_use_id, "content": _tool_result_content(b)})
        elif isinstance(b, TextBlock):
            parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            parts.append({"type": "image"})  # refused with a clear 400 when the prompt renders
    flush()
    return out


def _tool_result_content(block: ToolResultBlock) -> str | list[dict]:
    if block.content is None or isinstance(block.content, str):
        return block.content or ""
    return [{"type": "text", "text": b.text} if isinstance(b, TextBlock) else {"type": "image"} for b in block.content]


# -- results --------------------------------------------------------------
