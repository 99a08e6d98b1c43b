"""Llama 3: the whole reply is `{"name": ..., "parameters": {...}}`, perhaps after
`<|python_tag|>`, with further calls after `;`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferd.chat.tool_parsers.base import ToolParser
from inferd.chat.tool_parsers.call_json import call_from_json
from inferd.chat.tool_parsers.grammar import alternatives, call_object_schema, json_rule, repeated, requested_functions
from inferd.chat.tool_parsers.json_extent import JsonExtent
from inferd.chat.tool_parsers.markers import split_at_marker

PYTHON_TAG = "<|python_tag|>"
_ARGUMENT_KEYS = ("parameters", "arguments")

_START = "start"  # nothing but whitespace yet: a `{` here opens a call
_TEXT = "text"  # a plain reply; only <|python_tag|> can still open a call
_TAGGED = "tagged"  # before a call's `{`
_CALL = "call"
_BETWEEN = "between"  # after a call: whitespace and `;` until the next `{`
_TAIL = "tail"  # after something that was not a call: the rest is content


class Llama3JsonToolParser(ToolParser):
    """A reply holds calls only when it opens with one (`{` or <|python_tag|>); text
    before <|python_tag|> is content. Once something fails to be a call, it and the rest
    of the reply are content, verbatim."""

    name = "llama3_json"

    def __init__(self, token_id: Callable[[str], int | None] | None = None):
        super().__init__(token_id)
        self._state = _START
        self._held = ""  # text not yet judged
        self._raw: list[str] = []  # text since the last call, released verbatim if no call comes of it
        self._json: list[str] = []
        self._extent = JsonExtent()

    @staticmethod
    def detects(tokenizer_vocab_has: Callable[[str], bool], model_type: str) -> bool:
        return tokenizer_vocab_has(PYTHON_TAG)

    def call_grammar(self, tools: list[dict], tool_choice: Any) -> tuple[str, str]:
        # Meta's JSON tool-calling prompt asks for the bare object, without the tag.
        specs, many = requested_functions(tools, tool_choice)
        lines = [
            "start: " + repeated("call", "; ", many),
            *alternatives("call", [json_rule(call_object_schema(spec, "parameters")) for spec in specs]),
        ]
        return "lark", "\n".join(lines) + "\n"

    def _consume(self, text: str) -> None:
        if self._state == _START:
            text = self._consume_start(text)
        if self._state == _TEXT:
            text = self._consume_text(text)
        for at, char in enumerate(text):
            if self._state == _TAIL:
                self._emit_text(text[at:])
                return
            self._consume_char(char)

    def _consume_start(self, text: str) -> str:
        self._held += text
        opening = self._held.lstrip()
        leading_space = self._held[:len(self._held) - len(opening)]
        if opening.startswith("{"):
            self._raw, self._held, self._state = [leading_space], "", _TAGGED
            return opening
        if opening.startswith(PYTHON_TAG):
            self._raw, self._held, self._state = [leading_space, PYTHON_TAG], "", _TAGGED
            return opening[len(PYTHON_TAG):]
        if not opening or PYTHON_TAG.startswith(opening):
            return ""
        text, self._held, self._state = self._held, "", _TEXT
        return text

    def _consume_text(self, text: str) -> str:
        release, rest, found = split_at_marker(self._held + text, PYTHON_TAG)
        self._emit_text(release)
        if not found:
            self._held = rest
            return ""
        self._held, self._raw, self._state = "", [PYTHON_TAG], _TAGGED
        return rest

    def _consume_char(self, char: str) -> None:
        self._raw.append(char)
        if self._state in (_TAGGED, _BETWEEN):
            if char == "{":
                self._state, self._json, self._extent = _CALL, [], JsonExtent()
            elif char.isspace() or (char == ";" and self._state == _BETWEEN):
                return
            else:
                self._give_up()
                return
        self._json.append(char)
        self._extent.push(char)
        if self._extent.broken:
            self._give_up()
        elif self._extent.complete:
            call = call_from_json("".join(self._json), _ARGUMENT_KEYS)
            if call is None:
                self._give_up()
            else:
                self._emit_call(*call)
                self._raw, self._state = [], _BETWEEN

    def _give_up(self) -> None:
        self._emit_text("".join(self._raw))
        self._raw, self._state = [], _TAIL

    def _end(self) -> None:
        if self._state in (_START, _TEXT):
            self._emit_text(self._held)
        elif self._state in (_TAGGED, _CALL):
            self._emit_text("".join(self._raw))
        # Between calls only separators are held; the tail has released everything.
        self._held, self._raw = "", []
