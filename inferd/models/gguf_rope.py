"""Rebuild Hugging Face `rope_scaling` from GGUF metadata and the `rope_freqs` tensor.

Linear and YaRN scaling travel as `{arch}.rope.scaling.*` keys. Llama 3 scaling
does not: the converter bakes it into `rope_freqs`, one divisor per rotary
frequency pair — 1 for short wavelengths, `factor` for long ones, and a smooth
ramp between. That ramp is linear in 1/wavelength, so fitting it recovers the two
cut-off wavelengths; only their ratio to the original context is identifiable,
and the usual low_freq_factor = 1 normalization (Llama 3's own) pins it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from inferd.models.gguf_file import GGUFError, shortest_float32

# Relative tolerance for telling the ramp from its flat ends, and for accepting a fit.
_BAND_TOLERANCE = 1e-5
_FIT_TOLERANCE = 1e-4


def rope_scaling_from_metadata(meta: dict[str, Any], arch: str) -> dict[str, Any] | None:
    prefix = f"{arch}.rope.scaling."
    kind = meta.get(prefix + "type")
    if kind is None and f"{arch}.rope.scale_linear" in meta:  # pre-2024 files
        return {"rope_type": "linear", "factor": meta[f"{arch}.rope.scale_linear"]}
    if kind in (None, "none"):
        return None
    if kind == "linear":
        return {"rope_type": "linear", "factor": meta[prefix + "factor"]}
    if kind == "yarn":
        scaling = {
            "rope_type": "yarn",
            "factor": meta[prefix + "factor"],
            "original_max_position_embeddings": meta[prefix + "original_context_length"],
        }
        optional = {"yarn_beta_fast": "beta_fast", "yarn_beta_slow": "beta_slow", "yarn_attn_factor": "attention_factor"}
        scaling.update({hf: meta[prefix + key] for key, hf in optional.items() if prefix + key in meta})
        return scaling
    raise GGUFError(f"rope scaling type {kind!r} in this {arch!r} GGUF file is not supported (supported: linear, yarn, llama3)")


def llama3_scaling_from_rope_freqs(
    rope_freqs: np.ndarray, theta: float, rotary_dim: int, original_context: int | None = None
) -> dict[str, Any] | None:
    """The llama3 `rope_scaling` dict whose frequency divisors equal `rope_freqs`; None when all are 1."""
    divisors = np.asarray(rope_freqs, dtype=np.float64).reshape(-1)
    if divisors.size != rotary_dim // 2:
        raise GGUFError(f"rope_freqs has {divisors.size} entries; {rotary_dim // 2} expected for rotary dimension {rotary_dim}")
    if np.allclose(divisors, 1.0, rtol=0, atol=_BAND_TOLERANCE):
        return None
    factor = shortest_float32(divisors.max())
    inv_wavelen = 1.0 / (2 * math.pi * theta ** (np.arange(0, rotary_dim, 2) / rotary_dim))
    x_low, x_high = _ramp_ends(divisors, factor, inv_wavelen)
    context = original_context or round(1.0 / x_low)
    raw = (factor, context * x_low, context * x_high, context)
    tidy = (factor, round(raw[1], 4), round(raw[2], 4), context)
    for candidate in (tidy, raw):
        if np.allclose(_llama3_divisors(*candidate, inv_wavelen), divisors, rtol=_FIT_TOLERANCE, atol=0):
            factor, low, high, context = candidate
            return {
                "rope_type": "llama3",
                "factor": factor,
                "low_freq_factor": low,
                "high_freq_factor": high,
                "original_max_position_embeddings": int(context),
            }
    raise GGUFError("the rope_freqs tensor does not follow Llama 3 rope scaling; this GGUF file is not supported")


def _ramp_ends(divisors: np.ndarray, factor: float, x: np.ndarray) -> tuple[float, float]:
    """1/wavelength where the ramp leaves `factor` (x_low) and where it reaches 1 (x_high)."""
    unscaled = np.isclose(divisors, 1.0, rtol=_BAND_TOLERANCE, atol=0)
    scaled = np.isclose(divisors, factor, rtol=_BAND_TOLERANCE, atol=0)
    ramp = ~(unscaled | scaled)
    # Position on the ramp: 0 at the scaled end, 1 at the unscaled end.
    smooth = (1.0 / divisors[ramp] - 1.0 / factor) / (1.0 - 1.0 / factor)
    if ramp.sum() >= 2:
        slope, intercept = np.polyfit(x[ramp], smooth, 1)
        return -intercept / slope, (1.0 - intercept) / slope
    # Too few ramp points to fit: any ends that keep every point in its band reproduce the tensor.
    lo = x[scaled].max()
    hi = x[unscaled].min() if unscaled.any() else math.inf
    if ramp.any():
        x_mid, s_mid = x[ramp][0], smooth[0]
        span = 0.5 * min((x_mid - lo) / s_mid, (hi - x_mid) / (1.0 - s_mid))
        return x_mid - s_mid * span, x_mid + (1.0 - s_mid) * span
    if math.isinf(hi):
        return 2 * lo, 4 * lo
    return lo + (hi - lo) / 3, lo + 2 * (hi - lo) / 3


def _llama3_divisors(factor: float, low: float, high: float, context: float, x: np.ndarray) -> np.ndarray:
    wavelen = 1.0 / x
    smooth = (context * x - low) / (high - low)
    ramp = 1.0 / ((1.0 - smooth) / factor + smooth)
    return np.where(wavelen < context / high, 1.0, np.where(wavelen > context / low, factor, ramp))
