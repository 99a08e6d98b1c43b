"""A request's routing key: its prompt as text, read from any dialect's body.

Locality is judged on this text, so it must grow the way a conversation
grows: every piece (tools, system prompt, each message) renders to a tagged
chunk ending in a newline, and chunks are joined in prompt order, so turn
N+1's text starts with turn N's. Text parts render as themselves; other
parts (images, tool calls, files) as a short digest of their JSON: stable
across turns and small whatever their size. Tool definitions render in
full, since the worker reads them as part of the prompt.

Nothing is validated here (the worker does that): a body this cannot read
yields "" and is routed by load alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping

from inferd.router.policies.base import RoutingRequest

Tokenize = Callable[[str, Mapping], list[int] | None]

TEXT_PARTS = ("text", "input_text", "output_text")
VOLATILE_KEYS = ("cache_control",)  # clients move these between turns; not part of the prompt


def routing_request(
    path: str, body: Mapping, headers: Mapping[str, str], tokenize: Tokenize | None = None
) -> RoutingRequest:
    """`tokenize(path, body)` gives the rendered prompt's token ids when the
    router has the model's tokenizer, or None; it should not raise."""
    body = body if isinstance(body, Mapping) else {}
    route = path.split("?", 1)[0].rstrip("/")
    render = RENDERERS.get(route)
    token_ids = tokenize(path, body) if tokenize is not None else None
    if token_ids is None and route in PROMPT_ROUTES:
        token_ids = _prompt_tokens(body.get("prompt"))
    return RoutingRequest(
        path=path,
        body=body,
        text=render(body) if render else "",
        headers={k.lower(): v for k, v in headers.items()},
        token_ids=token_ids,
    )


# -- pieces ----------------------------------------------------------------


def _chunk(tag: str, text: str) -> str:
    return f"<{tag}>{text}\n"


def _json(value: object) -> str:
    if isinstance(value, Mapping):
        value = {k: v for k, v in value.items() if k not in VOLATILE_KEYS}
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


def _digest(value: object) -> str:
    return hashlib.sha1(_json(value).encode()).hexdigest()[:12]


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _part(part: object) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, Mapping) and part.get("type", "text") in TEXT_PARTS and isinstance(part.get("text"), str):
        return part["text"]
    kind = part.get("type") if isinstance(part, Mapping) else None
    return f"[{kind if isinstance(kind, str) else 'part'}:{_digest(part)}]"


def _content(content: object) -> str:
    """A string, a list of parts, or absent."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(_part(p) for p in content)
    return _part(content)


def _tools(tools: object) -> str:
    return _chunk("tools", _json(tools)) if isinstance(tools, list) and tools else ""


def _system(system: object) -> str:
    return _chunk("system", _content(system)) if system else ""


def _message(message: object) -> str:
    if not isinstance(message, Mapping):
        return _chunk("message", _part(message))
    role = message.get("role")
    text = _content(message.get("content"))
    for call in _list(message.get("tool_calls")):  # OpenAI and Ollama assistant turns
        text += f"[call:{_json(call)}]"
    for image in _list(message.get("images")):  # Ollama: base64 strings
        text += f"[image:{_digest(image)}]"
    return _chunk(role if isinstance(role, str) else "message", text)


def _prompt_text(prompt: object) -> str:
    """A completion prompt: a string, token ids, or a batch of either (the
    first decides, as it is read first); llama-server also mixes the two."""
    if isinstance(prompt, str):
        return prompt
    if not isinstance(prompt, list) or not prompt:
        return ""
    if isinstance(prompt[0], list) or all(isinstance(p, str) for p in prompt):
        return _prompt_text(prompt[0])
    pieces = [p if isinstance(p, str) else f"{p} " for p in prompt if isinstance(p, (str, int))]
    return "<tokens>" + "".join(pieces)  # a space after each id: [1, 2] never reads as a prefix of [1, 23]


def _prompt_tokens(prompt: object) -> list[int] | None:
    """Token ids when the prompt was sent as token ids (the first of a batch)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return list(prompt)
    return None


# -- dialects --------------------------------------------------------------


def _openai_chat(body: Mapping) -> str:
    return _tools(body.get("tools")) + "".join(_message(m) for m in _list(body.get("messages")))


def _completion(body: Mapping) -> str:
    return _prompt_text(body.get("prompt"))


def _anthropic(body: Mapping) -> str:
    messages = "".join(_message(m) for m in _list(body.get("messages")))
    return _tools(body.get("tools")) + _system(body.get("system")) + messages


def _ollama_generate(body: Mapping) -> str:
    images = "".join(f"[image:{_digest(i)}]" for i in _list(body.get("images")))
    prompt = body.get("prompt")
    return _system(body.get("system")) + images + (prompt if isinstance(prompt, str) else "")


def _response_item(item: object) -> str:
    if not isinstance(item, Mapping) or "role" in item:
        return _message(item)
    kind = item.get("type")
    if kind == "function_call":
        return _chunk("function_call", f"{item.get('name')}({item.get('arguments')})")
    if kind == "function_call_output":
        return _chunk("function_call_output", _content(item.get("output")))
    return _chunk(kind if isinstance(kind, str) else "item", _digest(item))


def _responses(body: Mapping) -> str:
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    return _tools(body.get("tools")) + _system(body.get("instructions")) + "".join(map(_response_item, _list(items)))


RENDERERS: dict[str, Callable[[Mapping], str]] = {
    "/v1/chat/completions": _openai_chat,
    "/chat/completions": _openai_chat,
    "/v1/completions": _completion,
    "/completions": _completion,
    "/completion": _completion,  # llama-server
    "/v1/messages": _anthropic,
    "/messages": _anthropic,
    "/api/chat": _openai_chat,  # Ollama: system is a message; images ride on messages
    "/api/generate": _ollama_generate,
    "/v1/responses": _responses,
    "/responses": _responses,
}
PROMPT_ROUTES = ("/v1/completions", "/completions", "/completion")
