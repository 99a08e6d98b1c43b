"""One normalized description of a model, read from a Hugging Face config dict.

Both checkpoint formats meet here: a `config.json` from a Hugging Face folder,
or the equivalent dict that `models.gguf.read_gguf_config` builds from GGUF
metadata. Older (`rope_theta` / `rope_scaling`) and newer (`rope_parameters`)
Hugging Face spellings are both accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class UnsupportedModelError(ValueError):
    """The checkpoint describes an architecture or option inferd cannot run."""


# model_type -> architecture module name under inferd.arch
ARCHITECTURES = {
    "gemma3_text": "gemma3",
    "gemma3": "gemma3",
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "llama",
}


@dataclass(frozen=True)
class RopeConfig:
    theta: float
    scaling: dict[str, Any] | None = None  # Hugging Face rope_scaling dict (rope_type, factor, ...)


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope: RopeConfig
    local_rope: RopeConfig | None = None  # rope for sliding-window layers, when it differs
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()  # "full_attention" | "sliding_attention" per layer
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    query_pre_attn_scalar: float | None = None
    hidden_act: str = "silu"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = field(default_factory=tuple)

    @property
    def arch(self) -> str:
        return ARCHITECTURES[self.model_type]

    @property
    def attn_scale(self) -> float:
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def is_sliding(self, layer: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer] == "sliding_attention"

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> "ModelConfig":
        hf = dict(hf.get("text_config") or {}, **{k: v for k, v in hf.items() if k != "text_config"})
        model_type = hf.get("model_type", "")
        if model_type not in ARCHITECTURES:
            raise UnsupportedModelError(
                f"model_type {model_type!r} is not supported; inferd runs: {', '.join(sorted(ARCHITECTURES))}"
            )
        num_heads = hf["num_attention_heads"]
        hidden = hf["hidden_size"]
        head_dim = hf.get("head_dim") or hidden // num_heads
        num_layers = hf["num_hidden_layers"]
        gemma = ARCHITECTURES[model_type] == "gemma3"
        rope, local_rope = _rope_configs(hf, gemma)
        eos = hf.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else ((eos,) if eos is not None else ())
        # Mistral windows every layer; Qwen2 only when use_sliding_window is set.
        windowed = gemma or model_type == "mistral" or hf.get("use_sliding_window")
        sliding_window = hf.get("sliding_window") if windowed else None
        return cls(
            model_type=model_type,
            vocab_size=hf["vocab_size"],
            hidden_size=hidden,
            intermediate_size=hf["intermediate_size"],
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=hf.get("num_key_value_heads") or num_heads,
            head_dim=head_dim,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            max_position_embeddings=hf.get("max_position_embeddings", 4096),
            rope=rope,
            local_rope=local_rope,
            sliding_window=sliding_window,
            layer_types=_layer_types(hf, num_layers, gemma, sliding_window),
            tie_word_embeddings=hf.get("tie_word_embeddings", gemma),
            attention_bias=hf.get("attention_bias", model_type == "qwen2"),
            qk_norm=gemma or model_type == "qwen3",
            query_pre_attn_scalar=hf.get("query_pre_attn_scalar") if gemma else None,
            hidden_act=hf.get("hidden_activation") or hf.get("hidden_act") or "silu",
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )


def _rope_configs(hf: dict[str, Any], gemma: bool) -> tuple[RopeConfig, RopeConfig | None]:
    params = hf.get("rope_parameters")
    if params and "full_attention" in params:  # per-layer-type form
        full = params["full_attention"]
        local = params.get("sliding_attention")
        return _rope(full), (_rope(local) if local else None)
    if params:  # single form
        return _rope(params), None
    scaling = hf.get("rope_scaling")
    rope = _rope({**(scaling or {}), "rope_theta": hf.get("rope_theta", 10000.0)})
    local = RopeConfig(theta=hf.get("rope_local_base_freq", 10000.0)) if gemma else None
    return rope, local


def _rope(params: dict[str, Any]) -> RopeConfig:
    params = dict(params)
    theta = float(params.pop("rope_theta", 10000.0))
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind == "default":
        return RopeConfig(theta=theta)
    if kind not in ("linear", "llama3", "yarn"):
        raise UnsupportedModelError(f"rope scaling type {kind!r} is not supported (supported: linear, llama3, yarn)")
    params["rope_type"] = kind
    return RopeConfig(theta=theta, scaling=params)


def _layer_types(hf: dict[str, Any], num_layers: int, gemma: bool, window: int | None) -> tuple[str, ...]:
    if hf.get("layer_types"):
        return tuple(hf["layer_types"])
    if not window:
        return ()
    if hf.get("model_type") == "mistral":
        return ("sliding_attention",) * num_layers
    if gemma:
        pattern = hf.get("sliding_window_pattern", 6)
        return tuple("full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(num_layers))
    # Qwen2-style: the first max_window_layers layers use full attention.
    first_full = hf.get("max_window_layers", num_layers)
    return tuple("full_attention" if i < first_full else "sliding_attention" for i in range(num_layers))
