"""The chat request every dialect becomes: OpenAI's chat-completions shape,
which the OpenAI dialect takes off the wire and the Anthropic, Ollama and
Responses dialects build by conversion (one core dialect, the others adapters).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from inferd.http.errors import BadRequest
from inferd.http.wire import WireModel

# Template variables the server sets from the request itself.
RESERVED_TEMPLATE_VARIABLES = ("messages", "tools", "add_generation_prompt")


def _check_template_variables(variables: dict) -> None:
    for name in RESERVED_TEMPLATE_VARIABLES:
        if name in variables:
            raise ValueError(f"chat_template_kwargs may not set {name!r}: the server sets it from the request's "
                             f"own fields; remove it")


def loop_guard_fields(body: BaseModel | None) -> dict[str, Any]:
    """The loop guard (max_pattern_size, min_count, min_pattern_size) as a dialect without those
    fields of its own carries them (Anthropic, Responses, Ollama's options): unknown fields of its body."""
    extra = (body.model_extra or {}) if body is not None else {}
    return {name: extra[name] for name in ("max_pattern_size", "min_count", "min_pattern_size") if name in extra}


class StreamOptions(WireModel):
    include_usage: bool = False


class TextPart(WireModel):
    type: Literal["text"]
    text: str


class ImagePart(WireModel):
    type: Literal["image_url", "input_image", "image"]


ContentPart = TextPart | ImagePart


class FunctionCall(WireModel):
    name: str
    arguments: str = ""


class ToolCall(WireModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(WireModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None


class SamplingFields(WireModel):
    """Fields shared by chat and completions (OpenAI's plus the common extensions)."""

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=8, description="number of choices, 1-8")
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    cache_prompt: bool = True
    # Requests with different salts never share prefix-cache blocks (vLLM's field).
    cache_salt: str | None = Field(None, min_length=1, max_length=256)
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v):
        if isinstance(v, list) and len(v) > 16:
            raise ValueError("at most 16 stop sequences")
        return v

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class JsonSchemaFormat(WireModel):
    name: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ResponseFormat(WireModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")  # llama-server's json_object with a schema


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    response_format: ResponseFormat | None = None
    json_schema: dict[str, Any] | None = None  # llama-server's: output must follow this JSON schema
    regex: str | None = None  # output must match this regular expression
    grammar: str | None = None  # output must follow this GBNF grammar
    reasoning_effort: str | None = None
    # Reasoning tokens allowed before </think> is forced; the first of the three names given wins.
    thinking_budget_tokens: int | None = None
    thinking_token_budget: int | None = None
    thinking_budget: int | None = None
    # le: the engine's MAX_LOOP_PATTERN_SIZE, written out: the router reads this model and imports no engine
    max_pattern_size: int = Field(0, ge=0, le=1024,
                                  description="loop guard: longest repeated pattern, in tokens; "
                                              "max_pattern_size * min_count must also fit the context")
    min_count: int = Field(0, ge=0, description="loop guard: repeats that end generation")
    min_pattern_size: int = Field(0, ge=0, le=1024, description="loop guard: shortest pattern counted, in tokens "
                                                                "(0 or 1: every length up to max_pattern_size)")

    @model_validator(mode="after")
    def _check(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        return self

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @field_validator("chat_template_kwargs")
    @classmethod
    def _settable(cls, v):
        _check_template_variables(v or {})
        return v

    def template_kwargs(self) -> dict[str, Any]:
        """chat_template_kwargs, top level or inside extra_body (some clients nest it)."""
        extra = (self.model_extra or {}).get("extra_body")
        if extra is not None and not isinstance(extra, dict):
            raise BadRequest("extra_body must be an object", param="extra_body")
        nested = (extra or {}).get("chat_template_kwargs") or {}
        if not isinstance(nested, dict):
            raise BadRequest("extra_body.chat_template_kwargs must be an object",
                             param="extra_body.chat_template_kwargs")
        try:
            _check_template_variables(nested)
        except ValueError as e:
            raise BadRequest(str(e), param="extra_body.chat_template_kwargs") from None
        kwargs = dict(nested)
        kwargs.update(self.chat_template_kwargs or {})
        if self.reasoning_effort is not None:
            kwargs.setdefault("reasoning_effort", self.reasoning_effort)
        return kwargs

    def requested_thinking_budget(self) -> int | None:
        for value in (self.thinking_budget_tokens, self.thinking_token_budget, self.thinking_budget):
            if value is not None:
                return value
        return None
