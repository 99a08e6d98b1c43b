"""One choice's text split into what OpenAI returns: reasoning_content,
content and tool_calls — whole, or delta by delta while streaming.

Reasoning comes off first (text inside <think>…</think>); the rest goes
through the model family's tool-call parser when the request has tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.chat.reasoning import ReasoningParser, ThinkMarkers
from inferd.chat.tool_parsers import ToolCall, ToolCallDelta, ToolParser


@dataclass
class ChoiceDelta:
    reasoning: str = ""
    content: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content or self.tool_calls)


@dataclass
class ChoiceMessage:
    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall]


class ChoiceOutput:
    def __init__(self, markers: ThinkMarkers | None, reasoning_started: bool, tool_parser: ToolParser | None):
        self.reasoning = ReasoningParser(markers, started=reasoning_started) if markers else None
        self.tools = tool_parser
        self.called_tools = False

    def parse(self, text: str) -> ChoiceMessage:
        reasoning, content = None, text
        if self.reasoning is not None:
            split = self.reasoning.parse(text)
            reasoning, content = split.reasoning, split.content or ""
        if self.tools is None:
            return ChoiceMessage(reasoning, content, [])
        parsed = self.tools.parse(content or "")
        self.called_tools = bool(parsed.tool_calls)
        return ChoiceMessage(reasoning, parsed.content, parsed.tool_calls)

    def feed(self, text: str) -> ChoiceDelta:
        return self._route(self.reasoning.feed(text) if self.reasoning else None, text)

    def finish(self) -> ChoiceDelta:
        delta = self._route(self.reasoning.finish(), "") if self.reasoning else ChoiceDelta()
        if self.tools is not None:
            tail = self.tools.finish()
            delta.content += tail.content
            delta.tool_calls += tail.tool_calls
            self.called_tools |= bool(tail.tool_calls)
        return delta

    def _route(self, split, text: str) -> ChoiceDelta:
        delta = ChoiceDelta()
        content = text
        if split is not None:
            delta.reasoning = split.reasoning or ""
            content = split.content or ""
        if self.tools is None or not content:
            delta.content = content
            return delta
        out = self.tools.feed(content)
        delta.content = out.content
        delta.tool_calls = out.tool_calls
        self.called_tools |= bool(out.tool_calls)
        return delta
