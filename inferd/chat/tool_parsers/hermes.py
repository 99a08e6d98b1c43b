"""Hermes / Qwen: each call is `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferd.chat.tool_parsers.base import ToolParser
from inferd.chat.tool_parsers.call_json import call_from_json
from inferd.chat.tool_parsers.grammar import alternatives, call_object_schema, json_rule, marker, repeated, requested_functions
from inferd.chat.tool_parsers.json_extent import JsonExtent
from inferd.chat.tool_parsers.markers import partial_marker_length, split_at_marker

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_ARGUMENT_KEYS = ("arguments", "parameters")


class HermesToolParser(ToolParser):
    """Text outside the tags is content. A call ends at the first `</tool_call>` outside
    a JSON string (an argument may quote the tag), or at the end of output. A tagged body
    that is not a call is content, tags included."""

    name = "hermes"

    def __init__(self, token_id: Callable[[str], int | None] | None = None):
        super().__init__(token_id)
        self._held = ""  # text that may be the start of <tool_call>
        self._body: str | None = None  # inside a call: what followed <tool_call>
        self._extent = JsonExtent()

    @staticmethod
    def detects(tokenizer_vocab_has: Callable[[str], bool], model_type: str) -> bool:
        return tokenizer_vocab_has(OPEN)

    def call_grammar(self, tools: list[dict], tool_choice: Any) -> tuple[str, str]:
        specs, many = requested_functions(tools, tool_choice)
        open_, close = marker(OPEN, self.token_id), marker(CLOSE, self.token_id)
        lines = [
            "start: " + repeated("call", "\n", many),
            f'call: {open_} "\\n" body "\\n" {close}',
            *alternatives("body", [json_rule(call_object_schema(spec, "arguments")) for spec in specs]),
        ]
        return "lark", "\n".join(lines) + "\n"

    def _consume(self, text: str) -> None:
        while True:
            if self._body is None:
                text = self._consume_text(text)
                if self._body is None:
                    return
            if not text:
                return
            text = self._consume_call(text)

    def _consume_text(self, text: str) -> str:
        release, rest, found = split_at_marker(self._held + text, OPEN)
        self._emit_text(release)
        if not found:
            self._held = rest
            return ""
        self._held = ""
        self._body = ""
        self._extent = JsonExtent()
        return rest

    def _consume_call(self, text: str) -> str:
        for at, char in enumerate(text):
            self._extent.push(char)
            if char == CLOSE[-1] and not self._extent.in_string:
                body = self._body + text[:at + 1]
                if body.endswith(CLOSE):
                    self._body = body
                    self._settle_call(body[:-len(CLOSE)])
                    return text[at + 1:]
        self._body += text
        return ""

    def _settle_call(self, json_text: str) -> None:
        call = call_from_json(json_text, _ARGUMENT_KEYS)
        if call is None:
            # Only the tag is spent; the body is read again as text, where a later
            # <tool_call> can still open a good call.
            self._emit_text(OPEN)
            self._held = self._body
        else:
            self._emit_call(*call)
        self._body = None

    def _end(self) -> None:
        while self._body is not None:
            # An unclosed call still counts when its JSON is whole; a cut-off tag is ignored.
            cut = partial_marker_length(self._body, CLOSE)
            self._settle_call(self._body[:len(self._body) - cut])
            self._consume("")
        self._emit_text(self._held)
        self._held = ""
