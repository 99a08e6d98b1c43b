"""Rotary position embeddings (half-split layout) with the scaling variants
Llama-family checkpoints use: linear, llama3 and yarn."""

from __future__ import annotations

import math

import torch

from inferd.models.config import RopeConfig


def inverse_frequencies(rope: RopeConfig, head_dim: int) -> tuple[torch.Tensor, float]:
    """Per-pair inverse frequencies and the attention factor applied to cos/sin."""
    inv_freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    s = rope.scaling
    if s is None:
        return inv_freq, 1.0
    kind = s["rope_type"]
    if kind == "linear":
        return inv_freq / s["factor"], 1.0
    if kind == "llama3":
        return _llama3(inv_freq, s), 1.0
    return _yarn(rope.theta, head_dim, s)


def _llama3(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    factor, low, high = s["factor"], s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_ctx = s.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn(theta: float, dim: int, s: dict) -> tuple[torch.Tensor, float]:
    factor = s["factor"]
    old_ctx = s.get("original_max_position_embeddings", 4096)
    beta_fast, beta_slow = s.get("beta_fast", 32), s.get("beta_slow", 1)
    mscale = s.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(old_ctx / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation_weight = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight
    return inv_freq, float(mscale)


class RotaryEmbedding(torch.nn.Module):
    """cos/sin for given positions; rotation applied in the activations' dtype.

    The tables are computed once for every position up to the largest seen
    (doubling as positions grow) and looked up: per step, cos and sin of a
    few positions were ten small ops a table, a fifteenth of a decode step
    of the bundled model. A position gets the same values in any step.
    """

    def __init__(self, rope: RopeConfig, head_dim: int):
        super().__init__()
        inv_freq, self.attention_factor = inverse_frequencies(rope, head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        # rotate_half(x) = roll(x) * sign: the sign is folded into sin once.
        half = head_dim // 2
        self.register_buffer("rotate_sign", torch.cat((-torch.ones(half), torch.ones(half))), persistent=False)
        self._tables: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin, [tokens, 1, head_dim], ready for `apply_rotary`."""
        key = (dtype, positions.device)
        cos, sin = self._tables.get(key, (None, None))
        end = int(positions.max()) + 1 if positions.numel() else 0
        if cos is None or cos.shape[0] < end:
            cos, sin = self._tables[key] = self._table(max(256, 1 << (end - 1).bit_length()), dtype, positions.device)
        return cos[positions], sin[positions]

    def _table(self, length: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = torch.arange(length, device=device).float()[:, None] * self.inv_freq.to(device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
        # Signing before the cast rounds to the same values: rounding is symmetric about zero.
        cos = (emb.cos() * self.attention_factor).to(dtype)
        return cos, (emb.sin() * self.attention_factor * self.rotate_sign.to(device)).to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x: [tokens, heads, head_dim] in the half-split layout; tables from
    `RotaryEmbedding`. Equals x * cos + rotate_half(x) * sin, in three ops
    fewer: rotate_half(x) = cat(-x2, x1) = roll(x, half) with x2's sign flipped."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin
