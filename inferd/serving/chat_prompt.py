"""A chat request's prompt: the text its messages render to through the
model's chat template, and its token ids. The worker, `count_tokens` and the
router's precise mode all count through here, so they agree.

Needs only a template and a tokenizer, never the engine: the router renders
prompts without loading weights.
"""

from __future__ import annotations

import json

from inferd.chat.jinja_environment import TemplateError
from inferd.chat.template import ChatTemplate
from inferd.http.errors import BadRequest
from inferd.serving.chat_request import ChatCompletionRequest


def tool_choice_mode(req: ChatCompletionRequest) -> str:
    """"none", "auto", "required" or "named"; auto when tools are given without a choice."""
    choice = req.tool_choice
    if not req.tools:
        if choice not in (None, "none", "auto"):
            raise BadRequest("tool_choice needs tools; send the tools the model may call", param="tool_choice")
        return "none"
    if choice is None or choice == "auto":
        return "auto"
    if choice in ("none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and (choice.get("function") or {}).get("name"):
        name = choice["function"]["name"]
        if name not in {(t.get("function") or {}).get("name") for t in req.tools}:
            raise BadRequest(f"tool_choice names {name!r}, which is not among the tools", param="tool_choice")
        return "named"
    raise BadRequest('tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
                     param="tool_choice")


def _template_message(message: dict) -> dict:
    if message["role"] == "developer":  # OpenAI's newer name for system instructions
        message["role"] = "system"
    # Echoed reasoning: templates read one name or the other.
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        message["reasoning_content"] = message["reasoning"] = reasoning
    for call in message.get("tool_calls") or []:
        # Templates index into arguments; OpenAI sends them as a JSON string.
        try:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"] or "{}")
        except (ValueError, TypeError):
            pass
    return message


def render_chat_prompt(template: ChatTemplate, req: ChatCompletionRequest, tools: list | None = None) -> str:
    """The exact prompt text a chat request becomes (also served by /apply-template).
    `tools`: the tools to render; by default the request's own."""
    messages = []
    for m in req.messages:
        if isinstance(m.content, list) and any(p.type != "text" for p in m.content):
            raise BadRequest("this model takes text only; remove the image parts from messages", param="messages")
        messages.append(_template_message(m.model_dump(exclude_none=True)))
    kwargs = req.template_kwargs()
    if kwargs.get("preserve_thinking", template.defaults.get("preserve_thinking")) is False:
        _drop_earlier_reasoning(messages)
    prefill = continues_final_message(req)
    try:
        if prefill:
            return _prefilled(template, messages, tools if tools is not None else req.tools, kwargs)
        return template.render(
            messages, tools=tools if tools is not None else req.tools,
            add_generation_prompt=req.add_generation_prompt, **kwargs,
        )
    except TemplateError as e:
        raise BadRequest(f"the chat template refused these messages: {e}", param="messages") from None


def continues_final_message(req: ChatCompletionRequest) -> bool:
    """Assistant prefill: a conversation ending in an assistant message is continued
    inside that message (llama-server, Anthropic), unless the request asks for a new
    turn with add_generation_prompt: true; vLLM's continue_final_message says so outright."""
    last_is_assistant = req.messages[-1].role == "assistant"
    asked_new_turn = "add_generation_prompt" in req.model_fields_set and req.add_generation_prompt
    if req.continue_final_message:
        if asked_new_turn:
            raise BadRequest("continue_final_message and add_generation_prompt cannot both be true: one continues "
                             "the last message, the other opens a new turn; set add_generation_prompt to false",
                             param="continue_final_message")
        if not last_is_assistant:
            raise BadRequest("continue_final_message needs the conversation to end in an assistant message",
                             param="continue_final_message")
        return True
    return last_is_assistant and not asked_new_turn


def _prefilled(template: ChatTemplate, messages: list[dict], tools, kwargs: dict) -> str:
    """The prompt ending inside the final assistant message: rendered whole, then cut
    after that message's text (templates close the turn after it)."""
    content = messages[-1].get("content") or ""
    text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    if not text.strip():  # nothing to continue: open the assistant's turn
        return template.render(messages[:-1], tools=tools, add_generation_prompt=True, **kwargs)
    rendered = template.render(messages, tools=tools, add_generation_prompt=False, **kwargs)
    for needle in (text, text.strip()):
        at = rendered.rfind(needle)
        if at >= 0:
            return rendered[:at + len(needle)]
    raise BadRequest("the chat template changes the final assistant message, so it cannot be continued; "
                     "end the conversation with a user message instead", param="messages")


def _drop_earlier_reasoning(messages: list[dict]) -> None:
    """preserve_thinking: false: reasoning of turns before the last user message is left out."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    for m in messages[:last_user]:
        m.pop("reasoning_content", None)
        m.pop("reasoning", None)


def submitted_prompt(template: ChatTemplate, req: ChatCompletionRequest) -> str:
    """The prompt a chat request is generated from: its tools are part of it unless tool_choice is none."""
    return render_chat_prompt(template, req, tools=req.tools if tool_choice_mode(req) != "none" else [])


def submitted_prompt_ids(template: ChatTemplate, tokenizer, req: ChatCompletionRequest) -> list[int]:
    return tokenizer.encode(submitted_prompt(template, req))
