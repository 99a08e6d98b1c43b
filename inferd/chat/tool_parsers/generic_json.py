"""For models without a tool-call format of their own: the reply is one JSON object,
`{"tool_calls": [{"name": ..., "arguments": {...}}, ...]}` or `{"content": "..."}`,
the shape the server constrains such models to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferd.chat.tool_parsers.base import ToolParser
from inferd.chat.tool_parsers.call_json import call_from_json
from inferd.chat.tool_parsers.grammar import alternatives, call_object_schema, json_rule, literal, repeated, requested_functions
from inferd.chat.tool_parsers.json_extent import JsonExtent
from inferd.chat.tool_parsers.json_string_decoder import JsonStringDecoder

_KEYS = ("content", "tool_calls")
_ARGUMENT_KEYS = ("arguments",)

_START = "start"
_BEFORE_KEY = "before_key"
_KEY = "key"
_AFTER_KEY = "after_key"
_BEFORE_VALUE = "before_value"
_CONTENT = "content"  # inside the content string
_NULL = "null"
_CALLS_FIRST = "calls_first"  # after `[`: a call or `]`
_CALLS_NEXT = "calls_next"  # after `,`: a call
_CALL = "call"
_AFTER_CALL = "after_call"
_AFTER_VALUE = "after_value"
_DONE = "done"
_RAW = "raw"  # not the envelope: the rest is content, verbatim

# Between values only whitespace and these characters may come.
_PUNCTUATION_MOVES = {
    (_START, "{"): _BEFORE_KEY,
    (_BEFORE_KEY, '"'): _KEY,
    (_AFTER_KEY, ":"): _BEFORE_VALUE,
    (_CALLS_FIRST, "{"): _CALL,
    (_CALLS_FIRST, "]"): _AFTER_VALUE,
    (_CALLS_NEXT, "{"): _CALL,
    (_AFTER_CALL, ","): _CALLS_NEXT,
    (_AFTER_CALL, "]"): _AFTER_VALUE,
    (_AFTER_VALUE, ","): _BEFORE_KEY,
    (_AFTER_VALUE, "}"): _DONE,
}


class GenericJsonToolParser(ToolParser):
    """Content streams as its string decodes; each call is emitted when its object closes.

    Text that turns out not to be the envelope is content verbatim, from the point the
    last decoded text or call ended. A reply that does not open with `{` is plain content.
    """

    name = "generic_json"

    def __init__(self, token_id: Callable[[str], int | None] | None = None):
        super().__init__(token_id)
        self._state = _START
        self._raw: list[str] = []  # text since the last commit, released verbatim on failure
        self._committed = False
        self._key = ""
        self._seen_keys: set[str] = set()
        self._decoder = JsonStringDecoder()
        self._null = ""
        self._call: list[str] = []
        self._extent = JsonExtent()

    @staticmethod
    def detects(tokenizer_vocab_has: Callable[[str], bool], model_type: str) -> bool:
        return False  # chosen only when no model-specific format is found

    def call_grammar(self, tools: list[dict], tool_choice: Any) -> tuple[str, str]:
        specs, many = requested_functions(tools, tool_choice)
        opening, closing = literal('{"tool_calls": ['), literal("]}")
        lines = [
            f"start: {opening} {repeated('call', ', ', many)} {closing}",
            *alternatives("call", [json_rule(call_object_schema(spec, "arguments")) for spec in specs]),
        ]
        return "lark", "\n".join(lines) + "\n"

    def _consume(self, text: str) -> None:
        for at, char in enumerate(text):
            if self._state == _RAW:
                self._emit_text(text[at:])
                return
            self._raw.append(char)
            self._consume_char(char)

    def _consume_char(self, char: str) -> None:
        state = self._state
        if state == _CONTENT:
            self._consume_content(char)
        elif state == _CALL:
            self._consume_call(char)
        elif state == _KEY:
            self._consume_key(char)
        elif state == _NULL:
            self._null += char
            if not "null".startswith(self._null):
                self._fail()
            elif self._null == "null":
                self._state = _AFTER_VALUE
        elif char.isspace():
            return
        elif state == _BEFORE_VALUE:
            self._open_value(char)
        else:
            self._consume_punctuation(state, char)

    def _consume_punctuation(self, state: str, char: str) -> None:
        target = _PUNCTUATION_MOVES.get((state, char))
        if target is None:
            self._fail()
            return
        self._state = target
        if target == _KEY:
            self._key = ""
        elif target == _CALL:
            self._call, self._extent = [], JsonExtent()
            self._consume_call(char)
        elif target == _DONE:
            self._commit()

    def _consume_key(self, char: str) -> None:
        if char != '"':
            self._key += char
            if not any(key.startswith(self._key) for key in _KEYS):
                self._fail()
        elif self._key in _KEYS and self._key not in self._seen_keys:
            self._seen_keys.add(self._key)
            self._state = _AFTER_KEY
        else:
            self._fail()

    def _open_value(self, char: str) -> None:
        if char == "n":
            self._state, self._null = _NULL, "n"
        elif char == '"' and self._key == "content":
            # From here the envelope is taken as recognized: a reply cut short inside
            # the string is content cut short, not a broken envelope.
            self._state, self._decoder = _CONTENT, JsonStringDecoder()
            self._commit()
        elif char == "[" and self._key == "tool_calls":
            self._state = _CALLS_FIRST
        else:
            self._fail()

    def _consume_content(self, char: str) -> None:
        decoded = self._decoder.push(char)
        if self._decoder.broken:
            self._fail()
        elif self._decoder.closed:
            self._state = _AFTER_VALUE
        elif decoded:
            self._emit_text(decoded)
            self._commit()

    def _consume_call(self, char: str) -> None:
        self._call.append(char)
        self._extent.push(char)
        if self._extent.broken:
            self._fail()
        elif self._extent.complete:
            call = call_from_json("".join(self._call), _ARGUMENT_KEYS)
            if call is None:
                self._fail()
            else:
                self._emit_call(*call)
                self._commit()
                self._state = _AFTER_CALL

    def _commit(self) -> None:
        self._raw, self._committed = [], True

    def _fail(self) -> None:
        self._emit_text("".join(self._raw))
        self._raw, self._state = [], _RAW

    def _end(self) -> None:
        # Cut short inside a string or a call, the unfinished part is content; cut short
        # in the envelope's punctuation after something was taken, there is nothing to add.
        if self._state != _RAW and (self._state in (_CONTENT, _CALL) or not self._committed):
            self._emit_text("".join(self._raw))
        self._raw = []
