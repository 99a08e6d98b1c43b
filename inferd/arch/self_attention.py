"""Self-attention block: fused QKV projection, optional QK-norm, RoPE,
paged attention, output projection."""

from __future__ import annotations

import torch
from torch import nn

from inferd.arch.attention import AttentionMetadata, KVCache, paged_attention
from inferd.arch.layers import RMSNorm
from inferd.arch.rope import apply_rotary
from inferd.models.config import ModelConfig


class SelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int, gemma_norms: bool):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=False)
        self.q_norm = self.k_norm = None
        if cfg.qk_norm:
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, unit_offset=gemma_norms, scale_in_float=gemma_norms)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, unit_offset=gemma_norms, scale_in_float=gemma_norms)
        self.sliding = cfg.is_sliding(layer)
        self.scale = cfg.attn_scale

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: KVCache,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rope
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        o = paged_attention(q, k, v, cache, meta, self.scale, self.sliding)
        return self.o_proj(o.reshape(t, self.q_size))
