"""One module per architecture; `build_model` picks by config."""

from __future__ import annotations

import torch

from inferd.arch.base import CausalLM
from inferd.models.config import ModelConfig


def build_model(cfg: ModelConfig) -> CausalLM:
    """An empty model on the meta device; `load_weights` fills it."""
    if cfg.arch == "gemma3":
        from inferd.arch.gemma3 import Gemma3ForCausalLM as cls
    else:
        from inferd.arch.llama import LlamaForCausalLM as cls
    with torch.device("meta"):
        return cls(cfg)
