"""The grammar stage: tokens a request's grammar disallows next get -inf.

The engine knows a grammar only through `GrammarConstraint` (chat.grammar's
TokenConstraint is one): it fills a row of a bitmask with the tokens allowed
next and is told each token sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class GrammarConstraint(Protocol):
    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        """Set the bits of the tokens allowed next in row `row` of a bitmask from `allocate_bitmask`."""

    def accept(self, token_id: int) -> None:
        """Advance past a sampled token; raises ValueError if it was not allowed."""

    @property
    def finished(self) -> bool:
        """The grammar is complete (or stopped on a limit): the output ends."""

    @property
    def error(self) -> str | None:
        """Why matching stopped early, if it did."""


def allocate_bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    """One bit per token, 32 tokens to an int32 word; every token starts allowed."""
    return torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """In place: logits of tokens whose bit is clear become -inf. `logits` is
    [rows, vocab_size]; tokens past the bitmask's width count as disallowed."""
    if logits.dim() != 2 or bitmask.dim() != 2 or logits.shape[0] != bitmask.shape[0]:
        raise ValueError(
            f"apply_bitmask needs logits [rows, vocab] and a bitmask [rows, words] with the same rows; "
            f"got {tuple(logits.shape)} and {tuple(bitmask.shape)}"
        )
    if bitmask.dtype != torch.int32:
        raise ValueError(f"the bitmask must be int32 (from allocate_bitmask), not {bitmask.dtype}")
    covered = min(logits.shape[1], bitmask.shape[1] * 32)
    bit_positions = torch.arange(32, dtype=torch.int32, device=logits.device)
    words = bitmask.to(logits.device, non_blocking=True)
    bits = ((words.unsqueeze(-1) >> bit_positions) & 1).flatten(1)[:, :covered]
    logits[:, :covered].masked_fill_(bits == 0, float("-inf"))
    logits[:, covered:] = float("-inf")


def mask_disallowed(x: torch.Tensor, positions: list[int], constraints: Sequence[GrammarConstraint]) -> None:
    """In place on rows `positions` of x [N, V]: -inf for every token the row's grammar disallows."""
    bitmask = allocate_bitmask(len(positions), x.shape[1])
    for k, constraint in enumerate(constraints):
        constraint.fill_mask(bitmask, k)
    index = torch.tensor(positions, device=x.device)
    rows = x[index]
    apply_bitmask(rows, bitmask)
    x[index] = rows
