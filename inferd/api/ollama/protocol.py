"""Pydantic models of Ollama's request shapes. Unknown fields are accepted,
as Ollama accepts them, so newer clients keep working."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class OllamaModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class Options(OllamaModel):
    """The `options` object: the runtime settings inferd honours (others are ignored)."""

    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    num_predict: int | None = None  # -1 (or -2): until the context is full
    stop: list[str] | None = None
    seed: int | None = None
    num_ctx: int | None = Field(None, ge=1)
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class ToolCallFunction(OllamaModel):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolCall(OllamaModel):
    function: ToolCallFunction


class Message(OllamaModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None


Think = bool | Literal["low", "medium", "high"]
Format = Literal["", "json"] | dict[str, Any] | None


class GenerationRequest(OllamaModel):
    """What /api/chat and /api/generate share."""

    model: str = Field(min_length=1)
    format: Format = None
    options: Options = Field(default_factory=Options)
    stream: bool = True
    think: Think | None = None
    keep_alive: str | int | float | None = None  # the model stays loaded for the server's life


class ChatRequest(GenerationRequest):
    messages: list[Message] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None


class GenerateRequest(GenerationRequest):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    raw: bool = False
    images: list[str] | None = None
    context: list[int] | None = None  # the token ids a previous answer returned


class ShowRequest(OllamaModel):
    model: str | None = None
    name: str | None = None  # the field's older name
    verbose: bool = False

    def requested(self) -> str:
        return self.model or self.name or ""


class PullRequest(OllamaModel):
    model: str | None = None
    name: str | None = None  # the field's older name
    insecure: bool = False  # Ollama's registry option; pulls here go to the Hugging Face Hub over its own TLS
    stream: bool = True

    def requested(self) -> str:
        return self.model or self.name or ""


class DeleteRequest(OllamaModel):
    model: str | None = None
    name: str | None = None

    def requested(self) -> str:
        return self.model or self.name or ""


class CopyRequest(OllamaModel):
    source: str = Field(min_length=1)
    destination: str = Field(min_length=1)
