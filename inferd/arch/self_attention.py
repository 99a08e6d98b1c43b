"""Self-attention block: fused QKV projection, optional QK-norm, RoPE,
paged attention, output projection."""

from __future__ import annotations

import torch
from torch import nn

from inferd.arch.attention import AttentionMetadata, KVCache, paged_attention
from inferd.arch.layers import RMSNorm, rms_norm
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
        self._qk_weight: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
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
        qkv = self.qkv_proj(x)
        # Q and K heads side by side, normed and rotated as one [t, H + Hkv, D] tensor.
        qk = qkv[:, : self.q_size + self.kv_size].view(t, self.num_heads + self.num_kv_heads, self.head_dim)
        v = qkv[:, self.q_size + self.kv_size :].view(t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            qk = rms_norm(qk, self._qk_norm_weight(), self.q_norm.eps, self.q_norm.scale_in_float)
        qk = apply_rotary(qk, *rope)
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        o = paged_attention(q, k, v, cache, meta, self.scale, self.sliding)
        return self.o_proj(o.reshape(t, self.q_size))

    def _qk_norm_weight(self) -> torch.Tensor:
        """q_norm's weight for each query head, then k_norm's for each KV head;
        rebuilt only when either norm's weight is replaced (loading)."""
        q_weight, k_weight = self.q_norm.weight, self.k_norm.weight
        if self._qk_weight is None or self._qk_weight[0] is not q_weight or self._qk_weight[1] is not k_weight:
            joint = torch.cat((q_weight.expand(self.num_heads, -1), k_weight.expand(self.num_kv_heads, -1)))
            self._qk_weight = (q_weight, k_weight, joint)
        return self._qk_weight[2]
