"""A request's prompt as text, for routing by locality, read from any
dialect's body by the pieces below (each dialect composes its own).

Locality is judged on this text, so it must grow the way a conversation
grows: every piece (tools, system prompt, each message) renders to a tagged
chunk ending in a newline, and chunks are joined in prompt order, so turn
N+1's text starts with turn N's. Text parts render as themselves; other
parts (images, tool calls, files) as a short digest of their JSON: stable
across turns and small whatever their size. Tool definitions render in
full, since the worker reads them as part of the prompt.

Nothing is validated here (the worker does that): a body this cannot read
yields "".
"""

from __future__ import annotations

import hashlib
import json as _json
from collections.abc import Mapping

TEXT_PARTS = ("text", "input_text", "output_text")
VOLATILE_KEYS = ("cache_control",)  # clients move these between turns; not part of the prompt


def chunk(tag: str, text: str) -> str:
    return f"<{tag}>{text}\n"


def as_json(value: object) -> str:
    if isinstance(value, Mapping):
        value = {k: v for k, v in value.items() if k not in VOLATILE_KEYS}
    return _json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def digest(value: object) -> str:
    return hashlib.sha1(as_json(value).encode()).hexdigest()[:12]


def as_list(value: object) -> list:
    return value if isinstance(value, list) else []


def part_text(part: object) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping) and part.get("type", "text") in TEXT_PARTS and isinstance(part.get("text"), str):
        return part["text"]
    kind = part.get("type") if isinstance(part, Mapping) else None
    return f"[{kind if isinstance(kind, str) else 'part'}:{digest(part)}]"


def content_text(content: object) -> str:
    """A string, a list of parts, or absent."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(part_text(p) for p in content)
    return part_text(content)


def tools_text(tools: object) -> str:
    return chunk("tools", as_json(tools)) if isinstance(tools, list) and tools else ""


def system_text(system: object) -> str:
    return chunk("system", content_text(system)) if system else ""


def message_text(message: object) -> str:
    if not isinstance(message, Mapping):
        return chunk("message", part_text(message))
    role = message.get("role")
    text = content_text(message.get("content"))
    for call in as_list(message.get("tool_calls")):  # OpenAI and Ollama assistant turns
        text += f"[call:{as_json(call)}]"
    for image in as_list(message.get("images")):  # Ollama: base64 strings
        text += f"[image:{digest(image)}]"
    return chunk(role if isinstance(role, str) else "message", text)


def prompt_text(prompt: object) -> str:
    """A completion prompt: a string, token ids, or a batch of either (the
    first decides, as it is read first); llama-server also mixes the two."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list) or not prompt:
        return ""
    if isinstance(prompt[0], list) or all(isinstance(p, str) for p in prompt):
        return prompt_text(prompt[0])
    pieces = [p if isinstance(p, str) else f"{p} " for p in prompt if isinstance(p, (str, int))]
    return "<tokens>" + "".join(pieces)  # a space after each id: [1, 2] never reads as a prefix of [1, 23]


def prompt_tokens(prompt: object) -> list[int] | None:
    """Token ids when the prompt was sent as token ids (the first of a batch)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return list(prompt)
    return None


def chat_messages_text(body: Mapping) -> str:
    """A chat body of tools and messages (OpenAI chat; Ollama's /api/chat, whose
    system prompt is a message and whose images ride on messages)."""
    return tools_text(body.get("tools")) + "".join(message_text(m) for m in as_list(body.get("messages")))


def first_prompt_text(body: Mapping) -> str | None:
    """A completion body's prompt when it is text (the first of a batch), else None."""
    prompt = body.get("prompt")
    prompt = prompt[0] if isinstance(prompt, list) and prompt and isinstance(prompt[0], str) else prompt
    return prompt if isinstance(prompt, str) else None
