"""Pydantic models of llama-server's native request bodies.

Unknown fields (mirostat, samplers, n_keep, ...) are accepted so llama.cpp
clients keep working, and reported by `ignored_fields()` for the log.
Defaults are llama-server's, not the OpenAI routes'.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from inferd.api.llamacpp.valid_text import find_unpaired_surrogate
from inferd.serving.sampling_defaults import DEFAULT_SAMPLING

# One prompt: text, token ids, or text and ids mixed; or a list of such prompts.
PromptPart = int | str
Prompt = str | list[PromptPart | list[PromptPart]]

# [token id or text, bias or false]; false bans the token.
BiasValue = float | bool
LogitBias = list[tuple[PromptPart, BiasValue]] | dict[str, BiasValue]


class LlamaRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data):
        if isinstance(data, dict):
            where = find_unpaired_surrogate(data)
            if where:
                raise ValueError(f"{where} holds an unpaired UTF-16 surrogate; send valid Unicode text")
        return data

    def ignored_fields(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


class GenerationFields(LlamaRequest):
    """What /completion and /infill share: limits, sampling, streaming."""

    n_predict: int | None = Field(None, ge=-1, description="-1 = until the context is full")
    max_tokens: int | None = Field(None, ge=-1, description="read when n_predict is absent")
    stream: bool = False
    cache_prompt: bool = True
    cache_salt: str | None = Field(None, min_length=1, max_length=256)
    temperature: float = DEFAULT_SAMPLING["temperature"]  # <= 0 is greedy
    top_k: int = DEFAULT_SAMPLING["top_k"]  # <= 0 is off
    top_p: float = DEFAULT_SAMPLING["top_p"]
    min_p: float = DEFAULT_SAMPLING["min_p"]
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = -1  # -1 (or 4294967295) = random
    stop: list[str] | str = Field(default_factory=list)
    ignore_eos: bool = False
    logit_bias: LogitBias | None = None
    n_probs: int = Field(0, ge=0, le=20)
    return_tokens: bool = False
    id_slot: int = -1  # accepted for compatibility; the scheduler places requests
    grammar: str | None = None  # GBNF the output must follow
    json_schema: dict | None = None  # JSON schema the output must follow
    response_fields: list[str] | None = None  # answer only these fields ("a/b" reaches into objects)
    post_sampling_probs: bool = False  # probabilities (0..1) rather than logprobs in completion_probabilities
    # Reasoning tokens allowed before the end of thinking is forced (the chat route's names; first given wins).
    thinking_budget_tokens: int | None = None
    thinking_token_budget: int | None = None
    thinking_budget: int | None = None
    # The loop guard, as on the chat route (le: the engine's MAX_LOOP_PATTERN_SIZE).
    max_pattern_size: int = Field(0, ge=0, le=1024)
    min_count: int = Field(0, ge=0)
    min_pattern_size: int = Field(0, ge=0, le=1024)

    def requested_thinking_budget(self) -> int | None:
        for value in (self.thinking_budget_tokens, self.thinking_token_budget, self.thinking_budget):
            if value is not None:
                return value
        return None

    def grammar_spec(self):
        """The output constraint, if any (json_schema wins over grammar, as in llama-server)."""
        from inferd.chat.grammar import GrammarSpec
        from inferd.chat.json_schema_strict import closed_objects

        if self.json_schema is not None:
            return GrammarSpec.json_schema(closed_objects(self.json_schema))
        if self.grammar:
            return GrammarSpec("gbnf", self.grammar)
        return None

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def requested_n_predict(self) -> int | None:
        """n_predict, else max_tokens, else None (the server's default applies)."""
        return self.n_predict if self.n_predict is not None else self.max_tokens


def _is_part(value: object) -> bool:
    return isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool)


class CompletionRequest(GenerationFields):
    prompt: Prompt

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value):
        value = _prompt_strings(value)
        # Checked by hand so a wrong shape gets one plain sentence, not a union's every branch.
        ok = isinstance(value, str) or isinstance(value, list) and all(
            _is_part(p) or isinstance(p, list) and all(_is_part(q) for q in p) for p in value
        )
        if not ok:
            raise ValueError("prompt must be text, a list of token ids and text, or a list of such prompts "
                             "(JSON objects, such as multimodal prompts, are not supported)")
        return value


def _prompt_strings(value):
    """llama-server's {"prompt_string": ...} objects as the text they hold (alone or in a list)."""
    def text(item):
        if isinstance(item, dict) and isinstance(item.get("prompt_string"), str):
            if item.get("multimodal_data"):
                raise ValueError("prompt.multimodal_data is not supported: this model takes text only")
            return item["prompt_string"]
        return item

    return [text(p) for p in value] if isinstance(value, list) else text(value)


class InputExtraChunk(LlamaRequest):
    filename: str = ""
    text: str


class InfillRequest(GenerationFields):
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[InputExtraChunk] = Field(default_factory=list)
    prompt: str | list[PromptPart] = ""  # written after the middle marker


class TokenizeRequest(LlamaRequest):
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(LlamaRequest):
    tokens: list[int]
