"""Per-request sampling parameters and their validation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NoReturn

# Upper bound on requested logprob alternatives; matches the OpenAI API limit.
MAX_LOGPROBS = 20
# Bias magnitude limit shared by the OpenAI-style APIs; -inf (a ban) is allowed on top.
MAX_LOGIT_BIAS = 100.0
# What one request may make the engine hold and do per token. The loop guard keeps
# max_pattern_size tokens and compares each new token against each of them, in Python.
MAX_LOOP_PATTERN_SIZE = 1024
# Stop strings are searched for in every text delta, and a partial match is held back.
MAX_STOP_STRINGS = 32
MAX_STOP_STRING_LENGTH = 512  # characters
# Stop token ids are a set per request, rebuilt per step while min_tokens masks them.
MAX_STOP_TOKEN_IDS = 1024


class SamplingParamsError(ValueError):
    """A sampling parameter is out of range; `field` names the offending parameter."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


GREEDY_BELOW = 1e-5


@dataclass
class SamplingParams:
    max_tokens: int | None = 16  # None = until the context is full
    min_tokens: int = 0
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 or -1 = off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # over prompt + output tokens (divide positive logits, multiply negative)
    presence_penalty: float = 0.0  # over output tokens only
    frequency_penalty: float = 0.0  # over output tokens only
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    logprobs: int | None = None  # None off; 0 = sampled token only; k = also the top-k alternatives
    post_sampling_probs: bool = False  # logprobs of the truncated distribution drawn from (sampling/post_sampling.py)
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    thinking_budget: int | None = None  # reasoning tokens before </think> is forced; None or -1 = unlimited
    max_pattern_size: int = 0  # loop guard: end when a pattern of up to this many tokens ...
    min_count: int = 0  # ... repeats this many times back to back (0 = off)
    min_pattern_size: int = 0  # ... counting only patterns at least this long (0 = 1)

    @property
    def greedy(self) -> bool:
        # Below this, temperature scaling leaves float32's range; it means "argmax" anyway.
        return self.temperature < GREEDY_BELOW

    def validate(self, vocab_size: int, max_model_len: int | None = None) -> None:
        """Raise SamplingParamsError for the first parameter outside its allowed range.
        `max_model_len` (the context size), when given, also bounds the loop guard."""
        if self.max_tokens is not None:
            _require_int("max_tokens", self.max_tokens)
            if self.max_tokens < 1:
                _fail("max_tokens", f"max_tokens must be >= 1 or None, got {self.max_tokens!r}")
        if self.thinking_budget is not None and self.thinking_budget != -1:
            _require_int("thinking_budget", self.thinking_budget)
            if self.thinking_budget < 0:
                _fail("thinking_budget", f"thinking_budget must be -1 (unlimited) or >= 0, got {self.thinking_budget!r}")
            if self.max_tokens is not None and self.thinking_budget > self.max_tokens:
                _fail("thinking_budget", f"thinking_budget ({self.thinking_budget}) must not exceed max_tokens "
                                         f"({self.max_tokens}); raise max_tokens or lower the budget")
        if self.max_pattern_size or self.min_count or self.min_pattern_size:
            _require_int("max_pattern_size", self.max_pattern_size)
            _require_int("min_count", self.min_count)
            _require_int("min_pattern_size", self.min_pattern_size)
            if self.max_pattern_size < 1 or self.min_count < 2:
                _fail("max_pattern_size", "the loop guard needs max_pattern_size >= 1 and min_count >= 2, "
                                          f"got {self.max_pattern_size} and {self.min_count}")
            if not 0 <= self.min_pattern_size <= self.max_pattern_size:
                _fail("min_pattern_size", "the loop guard's min_pattern_size must be in [0, max_pattern_size] "
                                          f"(0 and 1 look for every pattern), got {self.min_pattern_size} with "
                                          f"max_pattern_size {self.max_pattern_size}")
            self._validate_loop_guard_size(max_model_len)
        _require_int("min_tokens", self.min_tokens)
        if self.min_tokens < 0:
            _fail("min_tokens", f"min_tokens must be >= 0, got {self.min_tokens!r}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            _fail(
                "min_tokens",
                f"min_tokens must be <= max_tokens ({self.max_tokens}), got {self.min_tokens!r}",
            )

        _require_in_range("temperature", self.temperature, 0.0, 2.0)
        _require_int("top_k", self.top_k)
        if self.top_k < -1:
            _fail("top_k", f"top_k must be -1 or 0 (off) or a positive integer, got {self.top_k!r}")
        _require_number("top_p", self.top_p)
        if not 0.0 < self.top_p <= 1.0:
            _fail("top_p", f"top_p must be in (0, 1], got {self.top_p!r}")
        _require_in_range("min_p", self.min_p, 0.0, 1.0)

        # 1 is off; beyond these a penalty is a ban already, and a logit divided by less overflows.
        _require_in_range("repetition_penalty", self.repetition_penalty, MIN_REPETITION_PENALTY,
                          MAX_REPETITION_PENALTY)
        _require_in_range("presence_penalty", self.presence_penalty, -2.0, 2.0)
        _require_in_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)

        if self.logit_bias is not None:
            for token_id, bias in self.logit_bias.items():
                _require_token_id("logit_bias", token_id, vocab_size)
                # -inf is allowed: it is how a token gets banned outright.
                if not (bias == -math.inf or _is_number(bias) and -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS):
                    _fail(
                        "logit_bias",
                        f"logit_bias[{token_id}] must be in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}] or -inf, "
                        f"got {bias!r}",
                    )

        if self.seed is not None:
            _require_int("seed", self.seed)

        if self.logprobs is not None:
            _require_int("logprobs", self.logprobs)
            if not 0 <= self.logprobs <= MAX_LOGPROBS:
                _fail("logprobs", f"logprobs must be in [0, {MAX_LOGPROBS}] or None, got {self.logprobs!r}")

        if len(self.stop) > MAX_STOP_STRINGS:
            _fail("stop", f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(self.stop)}; "
                          "send fewer stop strings")
        for stop_string in self.stop:
            if not isinstance(stop_string, str) or not stop_string:
                _fail("stop", f"stop entries must be non-empty strings, got {stop_string!r}")
            if len(stop_string) > MAX_STOP_STRING_LENGTH:
                _fail("stop", f"stop strings must be at most {MAX_STOP_STRING_LENGTH} characters, "
                              f"got one of {len(stop_string)}; shorten it")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            _fail("stop_token_ids", f"at most {MAX_STOP_TOKEN_IDS} stop_token_ids are allowed, "
                                    f"got {len(self.stop_token_ids)}; send fewer")
        for token_id in self.stop_token_ids:
            _require_token_id("stop_token_ids", token_id, vocab_size)

    def _validate_loop_guard_size(self, max_model_len: int | None) -> None:
        """A loop is seen once min_count copies of a pattern are in the output, so
        max_pattern_size * min_count tokens must fit the context; and the guard's
        per-token work grows with max_pattern_size, so that has a ceiling too."""
        size, count = self.max_pattern_size, self.min_count
        if max_model_len is not None and size * count > max_model_len:
            if count > max_model_len:  # not even a 1-token pattern fits
                _fail("min_count", f"min_count must be at most {max_model_len} with this context "
                                   f"(--ctx-size {max_model_len}), got {count}: max_pattern_size * min_count "
                                   "tokens must fit the context; lower min_count")
            _fail("max_pattern_size", f"max_pattern_size * min_count ({size} * {count} = {size * count} tokens) "
                                      f"must not exceed the context size {max_model_len} (--ctx-size): a loop "
                                      "longer than the context can never be seen; lower max_pattern_size to at "
                                      f"most {min(max_model_len // count, MAX_LOOP_PATTERN_SIZE)}")
        if size > MAX_LOOP_PATTERN_SIZE:
            _fail("max_pattern_size", f"max_pattern_size must be at most {MAX_LOOP_PATTERN_SIZE}, got {size}: "
                                      "the loop guard compares every new token with that many earlier ones; "
                                      "lower max_pattern_size")


def _fail(field_name: str, message: str) -> NoReturn:
    raise SamplingParamsError(field_name, message)


def _require_int(field_name: str, value: object) -> None:
    # bool is an int subclass, but True/False as a count is always a caller mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(field_name, f"{field_name} must be an integer, got {value!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require_number(field_name: str, value: object) -> None:
    if not _is_number(value):
        _fail(field_name, f"{field_name} must be a number, got {value!r}")


MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY = 1e-3, 1e3


def _require_in_range(field_name: str, value: object, low: float, high: float) -> None:
    _require_number(field_name, value)
    # Written so that NaN fails the check too.
    if not low <= value <= high:  # type: ignore[operator]
        _fail(field_name, f"{field_name} must be in [{low:g}, {high:g}], got {value!r}")


def _require_token_id(field_name: str, token_id: object, vocab_size: int) -> None:
    if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < vocab_size:
        _fail(
            field_name,
            f"{field_name} token ids must be integers in [0, {vocab_size}), got {token_id!r}",
        )
