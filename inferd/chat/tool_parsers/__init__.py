"""Tool-call parsers: finding a model's tool calls in its output, whole or streamed,
and the grammars that force well-formed ones."""

from __future__ import annotations

from collections.abc import Callable

from inferd.chat.tool_parsers.base import (
    ParsedMessage, StreamDelta, ToolCall, ToolCallDelta, ToolParser, merge_deltas, new_call_id)
from inferd.chat.tool_parsers.generic_json import GenericJsonToolParser
from inferd.chat.tool_parsers.hermes import HermesToolParser
from inferd.chat.tool_parsers.llama3_json import Llama3JsonToolParser
from inferd.chat.tool_parsers.mistral import MistralToolParser

__all__ = [
    "TOOL_PARSERS", "ParsedMessage", "StreamDelta", "ToolCall", "ToolCallDelta", "ToolParser",
    "merge_deltas", "new_call_id", "select_tool_parser",
]

TOOL_PARSERS: dict[str, type[ToolParser]] = {
    parser.name: parser
    for parser in (HermesToolParser, Llama3JsonToolParser, MistralToolParser, GenericJsonToolParser)
}

# Most specific first: Hermes fine-tunes of Llama 3 keep <|python_tag|> in their vocabulary
# but call tools with <tool_call>.
_DETECTION_ORDER: tuple[type[ToolParser], ...] = (HermesToolParser, MistralToolParser, Llama3JsonToolParser)


def select_tool_parser(name: str | None, has_token: Callable[[str], bool], model_type: str) -> type[ToolParser]:
    """The parser named, else the one the vocabulary points to, else the generic JSON one."""
    if name is not None:
        try:
            return TOOL_PARSERS[name]
        except KeyError:
            raise ValueError(
                f"unknown tool parser {name!r}; valid names: {', '.join(sorted(TOOL_PARSERS))}") from None
    for parser in _DETECTION_ORDER:
        if parser.detects(has_token, model_type):
            return parser
    return GenericJsonToolParser
