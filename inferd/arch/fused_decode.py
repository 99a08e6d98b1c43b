"""A decoder's layers as one native call on decode steps (`kernels.decode_layers`).

Built once per model, on its first decode step, from its modules, when each
layer is the pre-norm block the call knows (Gemma's four norms or Llama's
two, a fused QKV and gate/up, an activation with a native kernel) and every
projection holds the GGUF file's blocks. A step takes it when it only
decodes, in the model's dtype (bf16, or float32 beside a bf16 KV cache), on
any number of rows, or at most three passes of the kernel's (24) beside
AMX's dense copies, one beside a portable build's (`rows_limit`): once the
Python between the kernels is gone the tiles beat dense weights (19-20 ms a
step of 8 rows against 24, AVX-512), and every decode row is computed alike
however many share its step. Every other step runs the modules, which, where they keep
dense copies, go dense from fewer rows (`file_blocks.LAYER_DENSE_FROM`)
since a prompt's rows are computed alike in a chunk of their own or beside
another's.
"""

from __future__ import annotations

import ctypes

import torch
from torch import nn

from inferd.arch.attention import AttentionMetadata, KVCache
from inferd.arch.gguf_linear import GGUFLinear
from inferd.arch.self_attention import SelfAttention
from inferd.kernels import decode_layers as native
from inferd.kernels import gguf_gemv, isa
from inferd.kernels.gated_activation import COEFFICIENTS


# Beside AMX's dense copies the one call takes up to three passes of the kernel: 12-24 rows
# 1.1-1.7x faster than the modules on them, 32 rows even (BENCHMARKS.md, session 24).
AMX_ROWS_LIMIT = 3 * gguf_gemv.MAX_ROWS


def rows_limit(keeps_dense_copies: bool) -> int | None:
    """The most decode rows a step takes as the one call (None: any number). Without the
    Python between them the tiles match the modules' path at any width where the modules use
    the tiles too, and beat Zen 4's AVX512-BF16 dense copies (12 and 16 rows: 1.5-1.7x; 24
    and 32: 1.03-1.12x; BENCHMARKS.md, session 23). AMX's dense copies catch up by 32 rows,
    and a portable build's float32 ones may win past one pass of its scalar kernel: there
    the modules take the wider steps."""
    if not keeps_dense_copies:
        return None
    if not gguf_gemv.vectorized():
        return gguf_gemv.MAX_ROWS
    return AMX_ROWS_LIMIT if isa.amx_bf16() else None


class FusedDecode:
    def __init__(self, shape: native.Shape, layers: list[native.Layer], widths: dict[str, int], keep: list,
                 max_rows: int | None = None):
        self.shape = shape
        self.dtype = torch.float32 if shape.is_float else torch.bfloat16
        self.layers = (native.Layer * len(layers))(*layers)
        self.widths = widths
        self.max_rows = max_rows  # rows_limit's
        self._keep = keep  # what the structures point into

    @classmethod
    def build(cls, model: nn.Module) -> FusedDecode | None:
        """The plan for `model.layers`, or None when some layer is not of a form the call knows."""
        if native.kernels() is None or not len(model.layers):
            return None
        first = model.layers[0]
        attention, mlp = first.self_attn, first.mlp
        if not isinstance(attention, SelfAttention) or getattr(mlp, "act_name", None) not in COEFFICIENTS:
            return None
        gemma = hasattr(first, "post_feedforward_layernorm")
        norms = [first.input_layernorm, first.post_attention_layernorm]
        if gemma:
            norms += [first.pre_feedforward_layernorm]
        dtype = attention.qkv_proj.kernel_out_dtype if isinstance(attention.qkv_proj, GGUFLinear) else None
        if dtype not in (torch.bfloat16, torch.float32):
            return None
        layers, keep = [], []
        for layer in model.layers:
            built = _layer(layer, gemma, dtype, keep)
            if built is None:
                return None
            layers.append(built)
        a, b = COEFFICIENTS[mlp.act_name]
        q_norm = attention.q_norm
        shape = native.Shape(
            hidden=model.cfg.hidden_size, heads=attention.num_heads, kv_heads=attention.num_kv_heads,
            head_dim=attention.head_dim, intermediate=mlp.intermediate, eps=norms[0].eps,
            qk_eps=q_norm.eps if q_norm is not None else 0.0, scale=attention.scale, act_a=a, act_b=b,
            scale_in_float=int(norms[0].scale_in_float),
            qk_scale_in_float=int(q_norm is not None and q_norm.scale_in_float), is_float=int(dtype == torch.float32))
        if any(n.eps != norms[0].eps or n.scale_in_float != norms[0].scale_in_float for n in norms):
            return None
        hidden, heads = model.cfg.hidden_size, attention.num_heads + attention.num_kv_heads
        widths = {"x": hidden, "y": hidden, "normed": hidden, "qkv": first.self_attn.qkv_proj.out_features,
                  "qk": heads * attention.head_dim, "attended": attention.q_size, "projected": hidden,
                  "gate_up": 2 * mlp.intermediate, "activated": mlp.intermediate,
                  "queries": attention.q_size, "attended_bf16": attention.q_size}
        return cls(shape, layers, widths, keep, rows_limit(attention.qkv_proj.dense_from_rows is not None))

    def covers(self, x: torch.Tensor, ropes: tuple, kv_caches: list[KVCache], meta: AttentionMetadata) -> bool:
        """Whether this step's layers can be the one call."""
        rows = x.shape[0]
        if meta.prefills or not meta.decodes or meta.decodes[-1].end != rows:
            return False
        if self.max_rows is not None and rows > self.max_rows:
            return False
        if x.dtype != self.dtype or not x.is_cpu or any(t.dtype != self.dtype for t in ropes):
            return False
        k_cache = kv_caches[0][0]
        if k_cache.dtype != torch.bfloat16 or not k_cache.is_contiguous():
            return False
        views = [v for g in meta.decodes for v in (g.full, g.sliding) if v is not None]
        return all(v.slots.dtype == torch.int64 and v.slots.is_contiguous() and v.mask.dtype == torch.float32
                   and v.mask.is_contiguous() for v in views)

    def __call__(self, x: torch.Tensor, ropes: tuple, kv_caches: list[KVCache], meta: AttentionMetadata):
        """x after the layers; `ropes`: (global cos, sin, local cos, sin)."""
        # Every step: an engine's caches, never kept here (engines on one model each have their own).
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches, strict=True):
            layer.k_cache, layer.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
        groups = (native.Group * len(meta.decodes))(*(_group(g) for g in meta.decodes))
        tables = [t.contiguous() for t in ropes]
        slots = meta.slot_mapping.contiguous()
        return native.run(self.shape, self.layers, x.contiguous(), tables, slots, groups, self.widths)


def _layer(layer: nn.Module, gemma: bool, dtype: torch.dtype, keep: list) -> native.Layer | None:
    """One layer's structure, or None when it is not of a form the call knows."""
    attention, mlp = layer.self_attn, layer.mlp
    projections = [attention.qkv_proj, attention.o_proj, mlp.gate_up_proj, mlp.down_proj]
    if not all(isinstance(p, GGUFLinear) and p.kernel_out_dtype == dtype for p in projections):
        return None
    if gemma != hasattr(layer, "post_feedforward_layernorm"):
        return None
    parts = [p.parts() for p in projections]
    keep += parts
    qk_norm = None if attention.q_norm is None else attention._qk_norm_weight()
    norms = [layer.input_layernorm.weight,
             layer.post_attention_layernorm.weight if gemma else None,
             (layer.pre_feedforward_layernorm if gemma else layer.post_attention_layernorm).weight,
             layer.post_feedforward_layernorm.weight if gemma else None, qk_norm]
    if any(w is not None and not (w.dtype == torch.float32 and w.is_contiguous()) for w in norms):
        return None
    keep += [w for w in norms if w is not None]
    return native.Layer(*(None if w is None else w.data_ptr() for w in norms),
                        *(native.projection(part, p.bias) for part, p in zip(parts, projections)),
                        None, None, int(attention.sliding))


def _group(group) -> native.Group:
    full, sliding = group.full, group.sliding
    return native.Group(group.start, group.end, full.slots.data_ptr(), full.mask.data_ptr(), full.slots.shape[-1],
                        None if sliding is None else sliding.slots.data_ptr(),
                        None if sliding is None else sliding.mask.data_ptr(),
                        0 if sliding is None else sliding.slots.shape[-1])
