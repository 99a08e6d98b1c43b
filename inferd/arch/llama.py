"""The Llama family: Llama, Mistral, Qwen2 (QKV biases), Qwen3 (QK-norm).
GQA and RoPE scaling come from the config."""

from __future__ import annotations

import torch
from torch import nn

from inferd.arch.attention import AttentionMetadata, KVCache
from inferd.arch.base import CausalLM
from inferd.arch.layers import GatedMLP, RMSNorm
from inferd.arch.rope import RotaryEmbedding
from inferd.arch.self_attention import SelfAttention
from inferd.models.config import ModelConfig


class LlamaLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.self_attn = SelfAttention(cfg, layer, gemma_norms=False)
        self.mlp = GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.hidden_act)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, rope, cache, meta):
        x = x + self.self_attn(self.input_layernorm(x), rope, cache, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(CausalLM):
    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        self.layers = nn.ModuleList(LlamaLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        with torch.device("cpu"):
            self.rotary = RotaryEmbedding(cfg.rope, cfg.head_dim)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list[KVCache], meta: AttentionMetadata
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        rope = self.rotary(positions, x.dtype)
        fused = self.fused_layers(x, (*rope, *rope), kv_caches, meta)
        if fused is not None:
            return self.norm(fused)
        for layer, cache in zip(self.layers, kv_caches):
            x = layer(x, rope, cache, meta)
        return self.norm(x)
