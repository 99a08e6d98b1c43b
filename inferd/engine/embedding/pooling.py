"""Per-token hidden states of packed sequences to one vector per sequence."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def pool(hidden: torch.Tensor, lengths: Sequence[int], mode: str, normalize: bool) -> torch.Tensor:
    """[T, H] packed rows -> [B, H] float32: the mean of each sequence's rows,
    its first ("cls") or last row, or their element-wise max."""
    sizes = torch.tensor(lengths, device=hidden.device)
    ends = torch.cumsum(sizes, 0)
    if mode == "cls":
        pooled = hidden[ends - sizes].float()
    elif mode == "last":
        pooled = hidden[ends - 1].float()
    elif mode == "mean":
        owner = torch.repeat_interleave(torch.arange(len(lengths), device=hidden.device), sizes)
        sums = torch.zeros(len(lengths), hidden.shape[1], device=hidden.device).index_add_(0, owner, hidden.float())
        pooled = sums / sizes[:, None]
    elif mode == "max":
        pooled = torch.stack([part.float().amax(0) for part in hidden.split(list(lengths))])
    else:
        raise ValueError(f"pooling {mode!r} gives one vector per token, not per sequence")
    return F.normalize(pooled, dim=-1) if normalize else pooled


def per_token(hidden: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """Every token's vector, one [n, H] float32 tensor per sequence (pooling "none")."""
    return list(hidden.float().split(list(lengths)))
