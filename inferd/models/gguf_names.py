"""GGUF tensor names -> Hugging Face parameter names, per architecture."""

from __future__ import annotations

import re

from inferd.models.gguf_file import GGUFError

_TOP_LEVEL = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}

# Blocks shared by every supported architecture; `ffn_norm` differs, see below.
_BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}

# Llama-style blocks have one norm before the MLP; Gemma 3 sandwiches both sublayers.
_LLAMA_BLOCK = {**_BLOCK, "ffn_norm": "post_attention_layernorm"}
_GEMMA3_BLOCK = {
    **_BLOCK,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}

BLOCK_NAMES = {"llama": _LLAMA_BLOCK, "qwen2": _LLAMA_BLOCK, "qwen3": _LLAMA_BLOCK, "gemma3": _GEMMA3_BLOCK}

# Tensors the converter adds that have no Hugging Face parameter; their content lives in the config.
DERIVED_TENSORS = {"rope_freqs.weight"}

_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_TOP_TENSOR = re.compile(r"(\w+)\.(weight|bias)")


def hf_name(arch: str, gguf_name: str) -> str:
    """The Hugging Face name of a GGUF tensor; GGUFError when the architecture has no such parameter."""
    if match := _BLOCK_TENSOR.fullmatch(gguf_name):
        layer, part, kind = match.groups()
        base = BLOCK_NAMES[arch].get(part)
        if base is not None:
            return f"model.layers.{layer}.{base}.{kind}"
    elif match := _TOP_TENSOR.fullmatch(gguf_name):
        part, kind = match.groups()
        if part in _TOP_LEVEL:
            return f"{_TOP_LEVEL[part]}.{kind}"
    raise GGUFError(
        f"tensor {gguf_name!r} in a {arch!r} GGUF file has no counterpart in the Hugging Face model "
        "(mixture-of-experts and multimodal variants are not supported); use a plain text-only checkpoint"
    )
