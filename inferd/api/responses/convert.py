"""Responses requests into chat requests, and parsed chat output back into
Responses output items and usage; also output items back into chat messages,
which is how a stored response becomes the start of the next turn."""

from __future__ import annotations

from typing import Any

from inferd.serving.chat_request import ChatCompletionRequest, loop_guard_fields
from inferd.api.responses.protocol import (
    FunctionCallItem, FunctionCallOutputItem, InputMedia, InputTokensDetails, MessageItem, OutputTokensDetails,
    ReasoningItem, ResponsesRequest, ResponseUsage, new_item_id,
)
from inferd.engine.outputs import RequestOutput
from inferd.http.errors import BadRequest


def input_messages(req: ResponsesRequest) -> list[dict]:
    """This turn's input as chat messages (instructions are not part of it:
    they apply to one response and are not carried along a chain)."""
    if req.input is None:
        return []
    if isinstance(req.input, str):
        return [{"role": "user", "content": req.input}]
    out: list[dict] = []
    for item in req.input:
        if isinstance(item, MessageItem):
            out.append({"role": item.role, "content": _content(item.content)})
        elif isinstance(item, FunctionCallItem):
            _append_call(out, item.call_id, item.name, item.arguments)
        elif isinstance(item, FunctionCallOutputItem):
            out.append({"role": "tool", "tool_call_id": item.call_id, "content": _content(item.output)})
        elif isinstance(item, ReasoningItem):
            pass  # earlier reasoning is not replayed into the prompt, as chat templates drop it too
    return out


def _content(content) -> str | list[dict]:
    if isinstance(content, str):
        return content
    # Media parts reach the template as image parts, which it refuses with a clear 400.
    return [{"type": "image"} if isinstance(p, InputMedia) else {"type": "text", "text": p.text or p.refusal or ""}
            for p in content]


def _append_call(messages: list[dict], call_id: str, name: str, arguments: str) -> None:
    """Calls of one turn join the assistant message just before them."""
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments or "{}"}}
    if messages and messages[-1]["role"] == "assistant":
        messages[-1].setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def output_messages(output: list[dict]) -> list[dict]:
    """A response's output items as the assistant message that produced them."""
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    for item in output:
        if item["type"] == "message":
            message["content"] += "".join(p.get("text", "") for p in item["content"])
        elif item["type"] == "reasoning":
            message["reasoning_content"] = "".join(p["text"] for p in item.get("content") or [])
        elif item["type"] == "function_call":
            _append_call([message], item["call_id"], item["name"], item["arguments"])
    return [message]


def to_chat_request(req: ResponsesRequest, conversation: list[dict]) -> ChatCompletionRequest:
    if not conversation:
        raise BadRequest("input: give at least one input item (or a previous_response_id)", param="input")
    messages = ([{"role": "system", "content": req.instructions}] if req.instructions else []) + conversation
    fields: dict[str, Any] = {
        "model": req.model, "messages": messages, "max_tokens": req.max_output_tokens,
        "temperature": req.temperature, "top_p": req.top_p, "stream": req.stream,
    }
    if req.tools:
        fields["tools"] = [_chat_tool(t) for t in req.tools]
    if req.tool_choice is not None:
        fields["tool_choice"] = _tool_choice(req.tool_choice)
    if req.text is not None and req.text.format is not None:
        fields["response_format"] = _response_format(req.text.format)
    if req.reasoning is not None and req.reasoning.effort is not None:
        fields["reasoning_effort"] = req.reasoning.effort
    fields.update(loop_guard_fields(req))
    return ChatCompletionRequest(**{k: v for k, v in fields.items() if v is not None})


def _chat_tool(tool) -> dict:
    if tool.type != "function":
        raise BadRequest(f"tools: only function tools are served here, not {tool.type!r}", param="tools")
    if not tool.name:
        raise BadRequest("tools: a function tool needs a name", param="tools")
    function: dict[str, Any] = {"name": tool.name, "description": tool.description or "",
                                "parameters": tool.parameters or {"type": "object", "properties": {}}}
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def _tool_choice(choice: str | dict) -> str | dict:
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise BadRequest("tool_choice must be auto, none, required or a function", param="tool_choice")
        return choice
    if choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadRequest('tool_choice: only {"type": "function", "name": ...} is served here', param="tool_choice")


def _response_format(fmt) -> dict | None:
    if fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return {"type": "json_object"}
    if fmt.schema_ is None:
        raise BadRequest("text.format.schema: Field required", param="text.format.schema")
    return {"type": "json_schema", "json_schema": {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict}}


# -- results ----------------------------------------------------------------


def reasoning_item(text: str, id: str | None = None) -> dict:
    return {"id": id or new_item_id("rs"), "type": "reasoning", "summary": [],
            "content": [{"type": "reasoning_text", "text": text}], "status": "completed"}


def message_item(text: str, status: str = "completed", id: str | None = None) -> dict:
    return {"id": id or new_item_id("msg"), "type": "message", "role": "assistant", "status": status,
            "content": [output_text_part(text)]}


def output_text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def function_call_item(call_id: str, name: str, arguments: str, status: str = "completed",
                       id: str | None = None) -> dict:
    return {"id": id or new_item_id("fc"), "type": "function_call", "status": status, "call_id": call_id,
            "name": name, "arguments": arguments}


def output_items(message, incomplete: bool) -> list[dict]:
    """A parsed choice (inferd.serving.chat_output.ChoiceMessage) as output items."""
    items = []
    if message.reasoning:
        items.append(reasoning_item(message.reasoning))
    if message.content or not message.tool_calls:
        items.append(message_item(message.content or "", "incomplete" if incomplete else "completed"))
    items += [function_call_item(t.id, t.name, t.arguments) for t in message.tool_calls]
    return items


def is_incomplete(final: RequestOutput, called_tools: bool) -> bool:
    return final.finish_reason == "length" and not called_tools


def usage(final: RequestOutput) -> ResponseUsage:
    u = final.usage
    return ResponseUsage(
        input_tokens=u.prompt_tokens, input_tokens_details=InputTokensDetails(cached_tokens=u.cached_tokens),
        output_tokens=u.completion_tokens, output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        total_tokens=u.prompt_tokens + u.completion_tokens,
    )
