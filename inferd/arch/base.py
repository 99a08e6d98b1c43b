"""What every architecture shares: embeddings, the LM head, and loading
Hugging Face-named weights into fused, engine-dtype parameters."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from inferd.arch.attention import AttentionMetadata, KVCache
from inferd.arch.fused_decode import FusedDecode
from inferd.arch.layers import RMSNorm
from inferd.models.config import ModelConfig

# Hugging Face projection name -> (fused parameter, shard index)
FUSED = {
    "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
    "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
}
# Prefixes multimodal checkpoints put in front of the text model's names.
_PREFIXES = ("model.language_model.", "language_model.model.", "language_model.")


class WeightLoadError(ValueError):
    """The checkpoint's tensors do not match the architecture."""


class CausalLM(nn.Module):
    """Subclasses build `embed_tokens`, `layers`, `norm` and call `forward`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        # An explicit (meta) weight skips the random init, whose meta kernel costs ~2 s of imports.
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.fast_head: nn.Module | None = None  # a quantized or packed head (arch.quantize); replaces lm_head
        self.fuse_decode = True  # decode steps' layers as one native call where they can be (arch/fused_decode.py)
        self._fused: FusedDecode | None = None
        self._fused_built = False

    def fused_layers(self, x: torch.Tensor, tables: tuple[torch.Tensor, ...], kv_caches: list[KVCache],
                     meta: AttentionMetadata) -> torch.Tensor | None:
        """x after every layer, as one native call, when this step can take it
        (tables: the global then the local layers' cos and signed sin); else None."""
        if not self.fuse_decode:
            return None
        if not self._fused_built:  # on the first step: after loading has put every weight in place
            self._fused, self._fused_built = FusedDecode.build(self), True
        if self._fused is None or not self._fused.covers(x, tables, kv_caches, meta):
            return None
        return self._fused(x, tables, kv_caches, meta)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.fast_head is not None:
            return self.fast_head(hidden).float()
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return torch.nn.functional.linear(hidden, weight).float()

    def greedy_tokens(self, hidden: torch.Tensor) -> list[int] | None:
        """Each row's first argmax of `compute_logits(hidden)`, -1 where a row has no finite
        maximum, from a head that finds it without writing the logits; else None."""
        pick = getattr(self.fast_head, "argmax", None)
        return pick(hidden) if pick is not None else None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype, device: torch.device) -> None:
        """Assign every parameter from (Hugging Face name, tensor) pairs.

        Call on a model built on the meta device: each parameter is replaced by
        the loaded tensor, so nothing is allocated twice.
        """
        pending: dict[str, list[torch.Tensor | None]] = {}
        for name, tensor in weights:
            name = normalize_name(name)
            if name.endswith("rotary_emb.inv_freq"):
                continue
            owner, attr = name.rsplit(".", 1)
            proj = owner.rsplit(".", 1)[-1]
            if proj in FUSED:
                fused, shard = FUSED[proj]
                key = f"{owner.rsplit('.', 1)[0]}.{fused}.{attr}"
                parts = pending.setdefault(key, [None] * (3 if fused == "qkv_proj" else 2))
                parts[shard] = tensor
                if all(p is not None for p in parts):
                    self._assign(key, torch.cat(parts, dim=0), dtype, device)
                    del pending[key]
                continue
            self._assign(name, tensor, dtype, device)
        if pending:
            raise WeightLoadError(f"incomplete fused projections in checkpoint: {sorted(pending)}")
        missing = [n for n, p in self.named_parameters() if p.is_meta]
        if missing:
            raise WeightLoadError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
        for module in self.modules():
            if hasattr(module, "inv_freq"):
                module.to(device)

    def _assign(self, name: str, tensor: torch.Tensor, dtype: torch.dtype, device: torch.device) -> None:
        if name == "lm_head.weight" and self.lm_head is None:
            return  # tied: the embedding serves as the head
        owner_name, attr = name.rsplit(".", 1)
        try:
            owner = self.get_submodule(owner_name)
            current = getattr(owner, attr)
        except AttributeError:
            raise WeightLoadError(f"checkpoint tensor {name!r} has no place in the {self.cfg.arch} architecture") from None
        if tuple(current.shape) != tuple(tensor.shape):
            raise WeightLoadError(f"{name}: checkpoint shape {tuple(tensor.shape)} != model shape {tuple(current.shape)}")
        if isinstance(owner, RMSNorm):
            owner.load(tensor.to(device))
            return
        setattr(owner, attr, nn.Parameter(tensor.to(device=device, dtype=dtype), requires_grad=False))


def normalize_name(name: str) -> str:
    """A checkpoint name as the model names it: no multimodal or `model.` prefix."""
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name[len("model."):] if name.startswith("model.") else name
