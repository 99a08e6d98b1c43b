"""Read a GGUF model as if it were the equivalent Hugging Face checkpoint.

`read_gguf_config` rebuilds the `config.json` dict and `iter_gguf_tensors`
yields Hugging Face parameter names and layouts, undoing what the HF -> GGUF
converter changed: Llama's interleaved Q/K rows and Gemma's `1 + w` norms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from inferd.models.gguf_dequant import dequantize
from inferd.models.gguf_file import GGUFError, GGUFFile, read_gguf_header
from inferd.models.gguf_names import DERIVED_TENSORS, hf_name
from inferd.models.gguf_rope import llama3_scaling_from_rope_freqs, rope_scaling_from_metadata

__all__ = ["GGUFError", "gguf_block_formats", "iter_gguf_blocks", "iter_gguf_tensors", "read_gguf_config"]

# general.architecture -> (Hugging Face model_type, architectures entry)
SUPPORTED_ARCHITECTURES = {
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
    "llama": ("llama", "LlamaForCausalLM"),  # Mistral files are `llama` too
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
}

_REQUIRED = object()


def read_gguf_config(path: str | Path) -> dict[str, Any]:
    """The Hugging Face config dict equivalent to the file's metadata."""
    # The config needs only the vocabulary's size; decoding its 262k strings costs half a second.
    return _hf_config(read_gguf_header(path))


def iter_gguf_tensors(path: str | Path, dtype: torch.dtype = torch.bfloat16) -> Iterator[tuple[str, torch.Tensor]]:
    """(Hugging Face name, tensor) pairs, dequantized one at a time and cast to `dtype`."""
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point torch dtype, got {dtype}")
    gguf = GGUFFile(path)
    arch = _architecture(gguf)
    # Resolve every name before the first yield, so an unsupported file fails before any work.
    plan = [(info, hf_name(arch, info.name)) for info in gguf.tensors.values() if info.name not in DERIVED_TENSORS]
    num_heads, num_kv_heads = _head_counts(gguf, arch) if arch == "llama" else (0, 0)  # only Llama reorders rows
    for info, name in plan:
        # Gemma stores norms as `1 + w`; subtract in float32 so the cast rounds once, as from the original.
        gemma_norm = arch == "gemma3" and info.name.endswith("norm.weight")
        tensor = dequantize(gguf.raw(info), info.qtype, info.shape, torch.float32 if gemma_norm else dtype)
        if gemma_norm:
            tensor = (tensor - 1.0).to(dtype)
        elif arch == "llama" and ".attn_q." in info.name:
            tensor = _uninterleave_rotary_rows(tensor, num_heads)
        elif arch == "llama" and ".attn_k." in info.name:
            tensor = _uninterleave_rotary_rows(tensor, num_kv_heads)
        yield name, tensor


def gguf_block_formats(path: str | Path, formats: Iterable[str]) -> dict[str, tuple[str, int]]:
    """Hugging Face name -> (block format, rows) of each matrix stored in one of
    `formats`, from the file's directory alone."""
    gguf = read_gguf_header(path)
    return {name: (info.qtype.name, info.shape[0]) for info, name in _block_matrices(gguf, set(formats))}


def iter_gguf_blocks(path: str | Path, formats: Iterable[str]) -> Iterator[tuple[str, str, torch.Tensor]]:
    """(Hugging Face name, block format, the file's bytes [rows, bytes per row]) of each
    matrix stored in one of `formats`, rows in the order `iter_gguf_tensors` gives them."""
    gguf = GGUFFile(path)
    arch = _architecture(gguf)
    num_heads, num_kv_heads = _head_counts(gguf, arch) if arch == "llama" else (0, 0)
    for info, name in _block_matrices(gguf, set(formats)):
        raw = torch.from_numpy(gguf.raw(info).copy())  # owned: the map is read-only and closes with the file
        if arch == "llama" and ".attn_q." in info.name:
            raw = _uninterleave_rotary_rows(raw, num_heads)
        elif arch == "llama" and ".attn_k." in info.name:
            raw = _uninterleave_rotary_rows(raw, num_kv_heads)
        yield name, info.qtype.name, raw


def _block_matrices(gguf: GGUFFile, formats: set[str]) -> list[tuple[Any, str]]:
    arch = _architecture(gguf)
    return [(info, hf_name(arch, info.name)) for info in gguf.tensors.values()
            if info.name not in DERIVED_TENSORS and len(info.shape) == 2 and info.qtype.name in formats]


def _uninterleave_rotary_rows(tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp rotates adjacent pairs (x0, x1), (x2, x3)...; Hugging Face Llama rotates halves
    (x0, x_{d/2})... The converter reorders each head's rows to match; this restores the order."""
    head_dim = tensor.shape[0] // heads
    return tensor.reshape(heads, head_dim // 2, 2, *tensor.shape[1:]).transpose(1, 2).reshape(tensor.shape)


def _architecture(gguf: GGUFFile) -> str:
    arch = gguf.metadata.get("general.architecture")
    if arch is None:
        raise GGUFError(f"{gguf.path} has no general.architecture key; it is not a model file")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GGUFError(
            f"GGUF architecture {arch!r} is not supported; inferd reads: {', '.join(sorted(SUPPORTED_ARCHITECTURES))}"
        )
    return arch


def _key(gguf: GGUFFile, arch: str, name: str, default: Any = _REQUIRED) -> Any:
    value = gguf.metadata.get(f"{arch}.{name}", default)
    if value is _REQUIRED:
        raise GGUFError(f"{gguf.path} lacks the required metadata key {arch}.{name}")
    if isinstance(value, list):  # some converters write per-layer arrays; these models have uniform layers
        if len(set(value)) != 1:
            raise GGUFError(f"{gguf.path}: per-layer values of {arch}.{name} differ ({sorted(set(value))}); not supported")
        value = value[0]
    return value


def _head_counts(gguf: GGUFFile, arch: str) -> tuple[int, int]:
    heads = _key(gguf, arch, "attention.head_count")
    return heads, _key(gguf, arch, "attention.head_count_kv", heads)


def _hf_config(gguf: GGUFFile) -> dict[str, Any]:
    arch = _architecture(gguf)
    model_type, class_name = SUPPORTED_ARCHITECTURES[arch]
    meta = gguf.metadata
    hidden = _key(gguf, arch, "embedding_length")
    num_layers = _key(gguf, arch, "block_count")
    heads, kv_heads = _head_counts(gguf, arch)
    head_dim = _key(gguf, arch, "attention.key_length", None) or _key(gguf, arch, "rope.dimension_count", None) or hidden // heads
    rope_theta = _key(gguf, arch, "rope.freq_base", 10000.0)
    config: dict[str, Any] = {
        "model_type": model_type,
        "architectures": [class_name],
        "vocab_size": _vocab_size(gguf, arch),
        "hidden_size": hidden,
        "intermediate_size": _key(gguf, arch, "feed_forward_length"),
        "num_hidden_layers": num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": _key(gguf, arch, "attention.layer_norm_rms_epsilon"),
        "rope_theta": rope_theta,
        "rope_scaling": _rope_scaling(gguf, arch, rope_theta, _key(gguf, arch, "rope.dimension_count", head_dim)),
        "max_position_embeddings": _key(gguf, arch, "context_length"),
        "tie_word_embeddings": "output.weight" not in gguf.tensors,
        # Qwen2 always has Q/K/V biases in Hugging Face; elsewhere the file says.
        "attention_bias": arch == "qwen2" or "blk.0.attn_q.bias" in gguf.tensors,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
    }
    if "tokenizer.ggml.padding_token_id" in meta:
        config["pad_token_id"] = meta["tokenizer.ggml.padding_token_id"]
    if arch == "llama":
        config["mlp_bias"] = "blk.0.ffn_up.bias" in gguf.tensors
    if arch == "gemma3":
        config.update(_gemma3_extras(gguf, hidden, heads, head_dim, num_layers))
    return config


def _vocab_size(gguf: GGUFFile, arch: str) -> int:
    tokens = gguf.metadata.get("tokenizer.ggml.tokens")
    if tokens is not None:
        return len(tokens)
    if "tokenizer.ggml.tokens" in gguf.skipped_lengths:
        return gguf.skipped_lengths["tokenizer.ggml.tokens"]
    if f"{arch}.vocab_size" in gguf.metadata:
        return gguf.metadata[f"{arch}.vocab_size"]
    if "token_embd.weight" in gguf.tensors:
        return gguf.tensors["token_embd.weight"].shape[0]
    raise GGUFError(f"{gguf.path} has neither a token list nor a token_embd.weight tensor; cannot tell the vocabulary size")


def _rope_scaling(gguf: GGUFFile, arch: str, theta: float, rotary_dim: int) -> dict[str, Any] | None:
    scaling = rope_scaling_from_metadata(gguf.metadata, arch)
    info = gguf.tensors.get("rope_freqs.weight")
    if info is None:
        return scaling
    if scaling is not None:
        raise GGUFError(f"{gguf.path} has both {arch}.rope.scaling.type and a rope_freqs tensor; it is ambiguous")
    divisors = dequantize(gguf.raw(info), info.qtype, info.shape, torch.float64).numpy()
    original_context = gguf.metadata.get(f"{arch}.rope.scaling.original_context_length")
    return llama3_scaling_from_rope_freqs(divisors, theta, rotary_dim, original_context)


def _gemma3_extras(gguf: GGUFFile, hidden: int, heads: int, head_dim: int, num_layers: int) -> dict[str, Any]:
    window = _key(gguf, "gemma3", "attention.sliding_window", None) or None
    pattern = gguf.metadata.get("gemma3.attention.sliding_window_pattern", 6)
    if window is None:
        sliding = [False] * num_layers
    elif isinstance(pattern, list):  # one flag per layer: True = sliding window
        sliding = [bool(flag) for flag in pattern]
    else:  # every `pattern`-th layer is global
        sliding = [(i + 1) % pattern != 0 for i in range(num_layers)]
    return {
        "sliding_window": window,
        "layer_types": ["sliding_attention" if s else "full_attention" for s in sliding],
        "rope_local_base_freq": _key(gguf, "gemma3", "rope.freq_base_swa", 10000.0),
        # The file does not record the attention scale; llama.cpp derives it the same way:
        # 1/sqrt(head_dim), except the 62-layer 27B model, which scales by hidden/heads.
        "query_pre_attn_scalar": hidden // heads if num_layers == 62 else head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "final_logit_softcapping": _key(gguf, "gemma3", "final_logit_softcapping", None),
        "attn_logit_softcapping": _key(gguf, "gemma3", "attn_logit_softcapping", None),
    }
