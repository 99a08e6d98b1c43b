"""Pydantic models of the Anthropic Messages wire shapes (requests and responses).

Requests accept unknown fields, as the OpenAI models do, so newer clients keep working.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class AnthropicModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class TextBlock(AnthropicModel):
    type: Literal["text"]
    text: str


class ImageBlock(AnthropicModel):
    type: Literal["image", "document"]


class ThinkingBlock(AnthropicModel):
    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(AnthropicModel):
    type: Literal["redacted_thinking"]
    data: str = ""


class ToolUseBlock(AnthropicModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(AnthropicModel):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] | None = None
    is_error: bool = False


InputBlock = TextBlock | ImageBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock


class InputMessage(AnthropicModel):
    role: Literal["user", "assistant"]
    content: str | list[InputBlock]


class Tool(AnthropicModel):
    name: str
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None


class ToolChoice(AnthropicModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(AnthropicModel):
    # "adaptive": the model decides how much to think, so no budget applies.
    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: int | None = Field(None, ge=0)


class MessagesRequest(AnthropicModel):
    model: str | None = None
    # Optional here so that a missing value is answered in Anthropic's words, not pydantic's.
    max_tokens: int | None = Field(None, ge=1)
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = None
    top_k: int | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    metadata: dict[str, Any] | None = None


class CountTokensRequest(AnthropicModel):
    model: str | None = None
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None


# -- responses ------------------------------------------------------------


def message_id(request_id: str) -> str:
    """Anthropic's id style (msg_<hex>) for a chat request id (msg-<hex>)."""
    return "msg_" + request_id.partition("-")[2]


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0


class OutputText(BaseModel):
    type: Literal["text"] = "text"
    text: str


class OutputThinking(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""  # a local model has nothing to sign with; clients require the field


class OutputToolUse(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


OutputBlock = OutputText | OutputThinking | OutputToolUse


class MessagesResponse(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[OutputBlock]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None = None
    usage: Usage


class CountTokensResponse(BaseModel):
    input_tokens: int
