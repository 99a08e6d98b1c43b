"""Self-attention block: fused QKV projection, optional QK-norm, RoPE,
paged attention, output projection. On CPU in bf16 the steps between the
projection and attention are one native call (`inferd.kernels.attention_inputs`)."""

from __future__ import annotations

import torch
from torch import nn

from inferd.arch.attention import AttentionMetadata, KVCache, paged_attention
from inferd.arch.layers import RMSNorm, rms_norm
from inferd.arch.rope import apply_rotary
from inferd.kernels import attention_inputs as native_inputs
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
        v = qkv[:, self.q_size + self.kv_size :].view(t, self.num_kv_heads, self.head_dim)
        # Q and K heads side by side, normed and rotated as one [t, H + Hkv, D] tensor.
        stored = native_inputs.supports(qkv, rope[0], cache[0])
        if stored:  # one native call, which also writes K and V to the cache
            qk = native_inputs.attention_inputs(
                qkv, self.num_heads, self.num_kv_heads, self.head_dim,
                None if self.q_norm is None else self._qk_norm_weight(),
                self.q_norm.eps if self.q_norm else 0.0, bool(self.q_norm and self.q_norm.scale_in_float),
                *rope, *cache, meta.slot_mapping)
        else:
            qk = qkv[:, : self.q_size + self.kv_size].view(t, self.num_heads + self.num_kv_heads, self.head_dim)
            if self.q_norm is not None:
                qk = rms_norm(qk, self._qk_norm_weight(), self.q_norm.eps, self.q_norm.scale_in_float)
            qk = apply_rotary(qk, *rope)
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        o = paged_attention(q, k, v, cache, meta, self.scale, self.sliding, kv_stored=stored)
        return self.o_proj(o.reshape(t, self.q_size))

    def _qk_norm_weight(self) -> torch.Tensor:
        """q_norm's weight for each query head, then k_norm's for each KV head;
        rebuilt only when either norm's weight is replaced (loading)."""
        q_weight, k_weight = self.q_norm.weight, self.k_norm.weight
        if self._qk_weight is None or self._qk_weight[0] is not q_weight or self._qk_weight[1] is not k_weight:
            joint = torch.cat((q_weight.expand(self.num_heads, -1), k_weight.expand(self.num_kv_heads, -1)))
            self._qk_weight = (q_weight, k_weight, joint)
        return self._qk_weight[2]
