"""Gemma 3 (text): sliding-window and global layers with their own RoPE
bases, QK-norm, four norms per block, scaled embeddings, tied head."""

from __future__ import annotations

import torch
from torch import nn

from inferd.arch.attention import AttentionMetadata, KVCache
from inferd.arch.base import CausalLM
from inferd.arch.layers import GatedMLP, RMSNorm
from inferd.arch.rope import RotaryEmbedding
from inferd.arch.self_attention import SelfAttention
from inferd.models.config import ModelConfig


def _norm(cfg: ModelConfig) -> RMSNorm:
    return RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, unit_offset=True, scale_in_float=True)


class Gemma3Layer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.sliding = cfg.is_sliding(layer)
        self.self_attn = SelfAttention(cfg, layer, gemma_norms=True)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)
        self.input_layernorm = _norm(cfg)
        self.post_attention_layernorm = _norm(cfg)
        self.pre_feedforward_layernorm = _norm(cfg)
        self.post_feedforward_layernorm = _norm(cfg)

    def forward(self, x, ropes, cache, meta):
        rope = ropes[1] if self.sliding else ropes[0]
        x = self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), rope, cache, meta), residual=x)
        return self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)), residual=x)


class Gemma3ForCausalLM(CausalLM):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.layers = nn.ModuleList(Gemma3Layer(cfg, i) for i in range(cfg.num_layers))
        self.norm = _norm(cfg)
        with torch.device("cpu"):
            self.rotary_global = RotaryEmbedding(cfg.rope, cfg.head_dim)
            self.rotary_local = RotaryEmbedding(cfg.local_rope or cfg.rope, cfg.head_dim)
        self.embed_scale = cfg.hidden_size**0.5

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list[KVCache], meta: AttentionMetadata
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        # The scale is rounded to the activation dtype, as the reference does.
        x = x * torch.tensor(self.embed_scale, dtype=x.dtype)
        ropes = (self.rotary_global(positions, x.dtype), self.rotary_local(positions, x.dtype))
        fused = self.fused_layers(x, (*ropes[0], *ropes[1]), kv_caches, meta)
        if fused is not None:
            return self.norm(fused)
        for layer, cache in zip(self.layers, kv_caches):
            x = layer(x, ropes, cache, meta)
        return self.norm(x)
