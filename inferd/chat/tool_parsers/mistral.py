"""Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`, or in newer
tokenizers (v11 on) `[TOOL_CALLS]name[ARGS]{...}` once per call."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from inferd.chat.tool_parsers.base import ToolParser
from inferd.chat.tool_parsers.call_json import call_from_value, compact_arguments, load_json
from inferd.chat.tool_parsers.grammar import (
    alternatives, call_object_schema, json_rule, literal, marker, repeated, requested_functions)
from inferd.chat.tool_parsers.json_extent import JsonExtent
from inferd.chat.tool_parsers.markers import partial_marker_length, split_at_marker

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
_ARGUMENT_KEYS = ("arguments", "parameters")
# Bounded so a runaway "name" is given up on instead of rescanned without end.
_NAME = re.compile(r"[\w.\-]{0,256}")

_TEXT = "text"
_AFTER_MARKER = "after_marker"  # whitespace, then `[` (a list of calls) or a name
_LIST = "list"
_NAME_STATE = "name"
_BEFORE_ARGS = "before_args"
_ARGS_STATE = "args"


class MistralToolParser(ToolParser):
    """Text outside calls is content. What follows [TOOL_CALLS] and is not a call in
    either form is content, marker included."""

    name = "mistral"

    def __init__(self, token_id: Callable[[str], int | None] | None = None):
        super().__init__(token_id)
        self._state = _TEXT
        self._held = ""  # text that may be the start of [TOOL_CALLS]
        self._raw: list[str] = []  # the call so far, released verbatim if it fails
        self._json: list[str] = []
        self._extent = JsonExtent()
        self._name = ""

    @staticmethod
    def detects(tokenizer_vocab_has: Callable[[str], bool], model_type: str) -> bool:
        return tokenizer_vocab_has(TOOL_CALLS)

    def call_grammar(self, tools: list[dict], tool_choice: Any) -> tuple[str, str]:
        specs, many = requested_functions(tools, tool_choice)
        start = marker(TOOL_CALLS, self.token_id)
        if self.token_id is not None and self.token_id(ARGS) is not None:
            args = marker(ARGS, self.token_id)
            bodies = [f"{start} {literal(spec.name)} {args} {json_rule(spec.parameters)}" for spec in specs]
            lines = ["start: call+" if many else "start: call", *alternatives("call", bodies)]
        else:
            bodies = [json_rule(call_object_schema(spec, "arguments")) for spec in specs]
            lines = [f'start: {start} "[" {repeated("call", ", ", many)} "]"', *alternatives("call", bodies)]
        return "lark", "\n".join(lines) + "\n"

    def _consume(self, text: str) -> None:
        while True:
            if self._state == _TEXT:
                text = self._consume_text(text)
                if self._state == _TEXT:
                    return
            for at, char in enumerate(text):
                self._consume_char(char)
                if self._state == _TEXT:
                    text = text[at + 1:]
                    break
            else:
                return

    def _consume_text(self, text: str) -> str:
        release, rest, found = split_at_marker(self._held + text, TOOL_CALLS)
        self._emit_text(release)
        if not found:
            self._held = rest
            return ""
        self._held, self._raw, self._state = "", [TOOL_CALLS], _AFTER_MARKER
        return rest

    def _consume_char(self, char: str) -> None:
        self._raw.append(char)
        if self._state == _AFTER_MARKER:
            if char.isspace():
                return
            if char == "[":
                self._begin_json(_LIST)
            else:
                self._state, self._name = _NAME_STATE, ""
                self._consume_name_char(char)
                return
        elif self._state == _NAME_STATE:
            self._consume_name_char(char)
            return
        elif self._state == _BEFORE_ARGS:
            if char.isspace():
                return
            if char != "{":
                self._give_up()
                return
            self._begin_json(_ARGS_STATE)
        self._json.append(char)
        self._extent.push(char)
        if self._extent.broken:
            self._give_up()
        elif self._extent.complete:
            self._settle_json()

    def _begin_json(self, state: str) -> None:
        self._state, self._json, self._extent = state, [], JsonExtent()

    def _consume_name_char(self, char: str) -> None:
        self._name += char
        if self._name.endswith(ARGS):
            self._name = self._name[:-len(ARGS)]
            if self._name:
                self._state = _BEFORE_ARGS
            else:
                self._give_up()
            return
        cut = partial_marker_length(self._name, ARGS)
        if not _NAME.fullmatch(self._name[:len(self._name) - cut]):
            self._give_up()

    def _settle_json(self) -> None:
        value = load_json("".join(self._json))
        if self._state == _LIST:
            calls = [call_from_value(item, _ARGUMENT_KEYS) for item in value] if isinstance(value, list) else []
            if not calls or None in calls:
                self._give_up()
                return
            for call in calls:
                self._emit_call(*call)
        else:
            arguments = compact_arguments(value)
            if arguments is None:
                self._give_up()
                return
            self._emit_call(self._name, arguments)
        self._raw, self._state = [], _TEXT

    def _give_up(self) -> None:
        # Only the marker is spent; what followed it is read again as text, where a
        # later [TOOL_CALLS] can still open a good call.
        self._emit_text(TOOL_CALLS)
        self._held, self._raw, self._state = "".join(self._raw[1:]), [], _TEXT

    def _end(self) -> None:
        self._consume("")
        while self._state != _TEXT:
            self._give_up()
            self._consume("")
        self._emit_text(self._held)
        self._held = ""
