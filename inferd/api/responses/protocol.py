"""Pydantic models of the OpenAI Responses wire shapes (requests and the
response object). Requests accept unknown fields so newer clients keep working."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferd.http.wire import WireModel


def new_item_id(prefix: str) -> str:
    """OpenAI's id style: resp_<hex>, msg_<hex>, fc_<hex>, rs_<hex>."""
    return f"{prefix}_{uuid.uuid4().hex}"


class InputText(WireModel):
    # Earlier assistant turns come back as output_text parts.
    type: Literal["input_text", "output_text", "text", "refusal"]
    text: str = ""
    refusal: str | None = None


class InputMedia(WireModel):
    type: Literal["input_image", "input_file", "input_audio"]


InputPart = InputText | InputMedia


class MessageItem(WireModel):
    type: Literal["message"] | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[InputPart]


class FunctionCallItem(WireModel):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str = ""
    id: str | None = None


class FunctionCallOutputItem(WireModel):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[InputPart]


class ReasoningItem(WireModel):
    type: Literal["reasoning"]
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None


InputItem = FunctionCallItem | FunctionCallOutputItem | ReasoningItem | MessageItem


class FunctionTool(WireModel):
    type: str  # only "function" is served; others are refused by name
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(WireModel):
    format: TextFormat | None = None


class ReasoningConfig(WireModel):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(WireModel):
    model: str | None = None
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool = False
    store: bool = True
    background: bool = False  # run later, without the connection: answered at once as "queued"
    previous_response_id: str | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None


# -- the response object ---------------------------------------------------


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class ResponseObject(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"] = "response"
    created_at: int = Field(default_factory=lambda: int(time.time()))
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    error: dict[str, Any] | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    model: str
    output: list[dict[str, Any]]
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = Field(default_factory=lambda: {"effort": None, "summary": None})
    store: bool = True
    temperature: float | None = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_p: float | None = None
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True


class InputTokensResponse(BaseModel):
    object: Literal["response.input_tokens"] = "response.input_tokens"
    input_tokens: int
