"""Content text with leading and trailing whitespace removed, decided while streaming."""

from __future__ import annotations


class TrimmedContent:
    """Streams text so that everything emitted joins to the whole text, stripped.

    Whitespace is held until non-whitespace follows it; what is held at the end is
    dropped. This keeps the newlines a model puts around its tool calls out of content.
    """

    def __init__(self) -> None:
        self._started = False
        self._held_space = ""

    def add(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._held_space += text
            return ""
        out = self._held_space + body
        self._held_space = text[len(body):]
        return out
