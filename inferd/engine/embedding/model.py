"""A model that computes vectors or scores, as the serving side sees it:
what its inputs may be (tokenizer, limit), what it answers, and the batcher
its forwards go through. Torch-free."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class PooledInput:
    ids: Sequence[int]
    type_ids: Sequence[int] | None = None  # segment of each token (a cross-encoder's query 0, document 1)

    def __len__(self) -> int:
        return len(self.ids)


# One result per input: a vector [H], per-token vectors [n, H] (pooling "none"), or a score.
PooledOutput = np.ndarray | float


@dataclass
class PooledModel:
    name: str
    kind: Literal["embed", "rerank"]  # vectors, or (query, document) scores
    pooling: str  # mean, cls, last, max, or none (a vector per token)
    normalized: bool  # vectors are unit length
    dimensions: int
    max_tokens: int  # the longest input
    vocab_size: int
    trailing_specials: int  # special tokens after the text ([SEP]); a truncated input keeps them
    encode: Callable[[Sequence[str]], list[list[int]]]  # texts -> ids, special tokens included
    # (query, documents) -> (ids, segment ids, sequence ids) per pair; cross-encoders only
    encode_pairs: Callable[[str, Sequence[str]], list[tuple[list[int], list[int], list[int | None]]]] | None
    batcher: object  # engine.embedding.batcher.PooledBatcher
    close: Callable[[], None] = lambda: None
