"""RoPE's cos/sin come from tables kept per dtype: the values of computing
them for the positions directly, whichever positions came before."""

from __future__ import annotations

import pytest
import torch

from inferd.arch.rope import RotaryEmbedding
from inferd.models.config import RopeConfig


def direct(rope: RotaryEmbedding, positions: torch.Tensor, dtype: torch.dtype):
    freqs = positions.float()[:, None] * rope.inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    cos = (emb.cos() * rope.attention_factor).to(dtype)
    return cos, (emb.sin() * rope.attention_factor * rope.rotate_sign).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scaling", [None, {"rope_type": "yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 32768}])
def test_looked_up_values_are_the_computed_ones(dtype, scaling):
    rope = RotaryEmbedding(RopeConfig(theta=1e6, scaling=scaling), 64)
    for positions in ([3], [0, 1, 2, 255], [256], [5, 4095, 1000], [17]):  # the table grows twice
        positions = torch.tensor(positions)
        cos, sin = rope(positions, dtype)
        want_cos, want_sin = direct(rope, positions, dtype)
        assert cos.shape == (len(positions), 1, 64) and cos.dtype == dtype and cos.is_contiguous()
        assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
    assert rope(torch.tensor([], dtype=torch.int64), dtype)[0].shape == (0, 1, 64)
