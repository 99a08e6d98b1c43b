"""What every tool-call parser shares: the result shapes, the streaming contract, and
`parse` defined as streaming the whole text, so the two can never disagree."""

from __future__ import annotations

import secrets
import string
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from inferd.chat.tool_parsers.trimmed_content import TrimmedContent

_ID_ALPHABET = string.ascii_letters + string.digits


def new_call_id() -> str:
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # compact JSON text of the arguments object


@dataclass
class ParsedMessage:
    content: str | None
    tool_calls: list[ToolCall]


@dataclass
class ToolCallDelta:
    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class StreamDelta:
    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)


def merge_deltas(deltas: Iterable[StreamDelta]) -> ParsedMessage:
    """Join streamed deltas the way an OpenAI client accumulates them."""
    content = ""
    calls: dict[int, ToolCall] = {}
    for delta in deltas:
        content += delta.content
        for part in delta.tool_calls:
            call = calls.get(part.index)
            if call is None:
                call = calls[part.index] = ToolCall(id=part.id or "", name=part.name or "", arguments="")
            call.arguments += part.arguments
    return ParsedMessage(content=content or None, tool_calls=[calls[i] for i in sorted(calls)])


class ToolParser(ABC):
    """One instance per request. Subclasses read text in `_consume` / `_end` and report
    through `_emit_text` and `_emit_call`.

    A call is emitted only once it is complete and valid (one delta with id, name and the
    whole arguments), because a call found malformed later must become content instead,
    and a streamed fragment cannot be taken back.

    `token_id` looks a marker up in the model's vocabulary; with it, `call_grammar`
    names markers that are single tokens (`<tool_call>`, `[TOOL_CALLS]`) by token id,
    as the model emits them, instead of spelling them out as text.
    """

    name: ClassVar[str]

    def __init__(self, token_id: Callable[[str], int | None] | None = None):
        self.token_id = token_id
        self._content = TrimmedContent()
        self._next_index = 0
        self._text_out: list[str] = []
        self._calls_out: list[ToolCallDelta] = []

    def parse(self, text: str) -> ParsedMessage:
        fresh = type(self)(token_id=self.token_id)
        return merge_deltas([fresh.feed(text), fresh.finish()])

    def feed(self, delta: str) -> StreamDelta:
        self._consume(delta)
        return self._take()

    def finish(self) -> StreamDelta:
        self._end()
        return self._take()

    @abstractmethod
    def call_grammar(self, tools: list[dict], tool_choice: Any) -> tuple[str, str]:
        """("lark", grammar) forcing one call (a named tool_choice) or one or more ("required")."""

    @staticmethod
    @abstractmethod
    def detects(tokenizer_vocab_has: Callable[[str], bool], model_type: str) -> bool:
        """Whether a model with this vocabulary and architecture speaks this format."""

    @abstractmethod
    def _consume(self, text: str) -> None:
        """Read the next piece of output."""

    @abstractmethod
    def _end(self) -> None:
        """The output is over: settle whatever is still held."""

    def _emit_text(self, text: str) -> None:
        self._text_out.append(self._content.add(text))

    def _emit_call(self, name: str, arguments: str) -> None:
        self._calls_out.append(
            ToolCallDelta(index=self._next_index, id=new_call_id(), name=name, arguments=arguments))
        self._next_index += 1

    def _take(self) -> StreamDelta:
        out = StreamDelta(content="".join(self._text_out), tool_calls=self._calls_out)
        self._text_out, self._calls_out = [], []
        return out
