"""What crosses into the engine: one typed request. Torch-free, so the HTTP
side builds it without importing the engine's tensor code."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferd.engine.sampling_params import SamplingParams

if TYPE_CHECKING:
    from inferd.engine.sampling.grammar_mask import GrammarConstraint


class Priority(enum.IntEnum):
    HIGH = 0
    NORMAL = 1
    LOW = 2


@dataclass(frozen=True)
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: Priority = Priority.NORMAL
    cache_prompt: bool = True  # False: a cold prefill that neither reads nor donates cache blocks
    constraint: GrammarConstraint | None = None  # the grammar the output must follow (outside reasoning)
    reasoning_started: bool = False  # the prompt ends inside an open <think>
    cache_salt: str | None = None  # requests share cached blocks only with the same salt (None: no salt)
