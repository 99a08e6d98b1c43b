"""Message content as templates expect it: a string, or OpenAI content parts.

OpenAI clients may send `content` as a list of parts
(`[{"type": "text", "text": "..."}]`). Templates that loop over parts get the
list unchanged; every other template gets the text parts joined by newlines.
"""

from __future__ import annotations

import re
from typing import Any

from inferd.chat.jinja_environment import TemplateError

# A template that loops over a message's content handles content parts itself.
_LOOPS_OVER_CONTENT = re.compile(r"\{%-?\s*for\s+\w+\s+in\s+[^%]*content")


def template_reads_content_parts(source: str) -> bool:
    return _LOOPS_OVER_CONTENT.search(source) is not None


def join_text_parts(content: Any) -> Any:
    """`content` as one string when it is a list of text parts; other values unchanged."""
    if not isinstance(content, list):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            texts.append(str(part.get("text") or ""))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise TemplateError(f"content part of type {kind!r} cannot be rendered as text; send only text parts")
    return "\n".join(texts)


def with_text_content(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of `messages` whose list-of-parts content is joined into a string."""
    return [
        {**message, "content": join_text_parts(message["content"])}
        if isinstance(message.get("content"), list)
        else message
        for message in messages
    ]
