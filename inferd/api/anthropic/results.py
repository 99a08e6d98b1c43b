"""Chat results as Anthropic content blocks, stop reasons and usage."""

from __future__ import annotations

import json

from inferd.api.anthropic.protocol import OutputBlock, OutputText, OutputThinking, OutputToolUse, Usage
from inferd.engine.outputs import RequestOutput


def content_blocks(message) -> list[OutputBlock]:
    """A parsed choice (inferd.serving.chat_output.ChoiceMessage) as content blocks."""
    blocks: list[OutputBlock] = []
    if message.reasoning:
        blocks.append(OutputThinking(thinking=message.reasoning))
    if message.content:
        blocks.append(OutputText(text=message.content))
    blocks += [OutputToolUse(id=t.id, name=t.name, input=tool_input(t.arguments)) for t in message.tool_calls]
    return blocks


def tool_input(arguments: str) -> dict:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def stop_reason(final: RequestOutput, called_tools: bool, stop_sequences: list[str]) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence). Only the client's own stop sequences count as
    one; the template's turn-end strings are an ordinary end of turn."""
    if called_tools:
        return "tool_use", None
    if final.finish_reason == "length":
        return "max_tokens", None
    if isinstance(final.stop_reason, str) and final.stop_reason in stop_sequences:
        return "stop_sequence", final.stop_reason
    return "end_turn", None


def usage(final: RequestOutput) -> Usage:
    # Anthropic counts cached prompt tokens apart from input_tokens.
    cached = final.usage.cached_tokens
    return Usage(input_tokens=final.usage.prompt_tokens - cached, output_tokens=final.usage.completion_tokens,
                 cache_read_input_tokens=cached)
