"""Small GGUF models written the way the HF -> GGUF converter writes them:
tensor names from gguf's own TensorNameMap, Llama Q/K rows interleaved, Gemma
norms stored as 1 + w, Llama 3 rope scaling baked into a rope_freqs tensor."""

from __future__ import annotations

import math

import gguf
import numpy as np
import torch
import transformers
from gguf import GGMLQuantizationType as Q

GGUF_ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2,
             "qwen3": gguf.MODEL_ARCH.QWEN3, "gemma3": gguf.MODEL_ARCH.GEMMA3}


# -- writing GGUF files as the converter does ----------------------------------

def converter_permute(w: torch.Tensor, heads: int) -> torch.Tensor:
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def converter_rope_freqs(theta, dim, factor, low, high, context) -> np.ndarray:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    out = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < context / high:
            out.append(1.0)
        elif wavelen > context / low:
            out.append(factor)
        else:
            smooth = (context / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_gguf(path, arch: str, cfg: dict, state: dict[str, torch.Tensor], qtypes: dict[str, Q] | None = None,
               pooling: gguf.PoolingType | None = None) -> None:
    """`cfg` is a Hugging Face config.json dict; `qtypes` maps HF names to a storage type (default F32);
    `pooling` makes it an embedding model (`<arch>.pooling_type`, as llama.cpp's converter writes one)."""
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[GGUF_ARCH[arch]])
    if pooling is not None:
        w.add_pooling_type(pooling)
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    if head_dim != cfg["hidden_size"] // heads:  # config.json files spell head_dim out only then
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if arch == "llama":
        w.add_vocab_size(cfg["vocab_size"])
        w.add_rope_dimension_count(head_dim)
    scaling = cfg.get("rope_scaling") or {}
    if scaling.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(scaling["factor"])
    elif scaling.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(scaling["factor"])
        w.add_rope_scaling_orig_ctx_len(scaling["original_max_position_embeddings"])
    elif scaling.get("rope_type") == "llama3":
        w.add_tensor("rope_freqs.weight", converter_rope_freqs(
            cfg["rope_theta"], head_dim, scaling["factor"], scaling["low_freq_factor"],
            scaling["high_freq_factor"], scaling["original_max_position_embeddings"]))
    if arch == "gemma3":
        w.add_sliding_window(cfg["sliding_window"])
        w.add_rope_freq_base_swa(cfg["rope_local_base_freq"])
        if cfg.get("final_logit_softcapping"):
            w.add_final_logit_softcapping(cfg["final_logit_softcapping"])
    w.add_tokenizer_model("llama")
    w.add_token_list([f"<t{i}>" for i in range(cfg["vocab_size"])])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])

    names = gguf.get_tensor_name_map(GGUF_ARCH[arch], cfg["num_hidden_layers"])
    for name, tensor in state.items():
        if name == "lm_head.weight" and cfg["tie_word_embeddings"]:
            continue
        base, suffix = name.rsplit(".", 1)
        if arch == "llama" and ".q_proj." in name:
            tensor = converter_permute(tensor, heads)
        if arch == "llama" and ".k_proj." in name:
            tensor = converter_permute(tensor, kv_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            tensor = tensor + 1
        _add_tensor(w, f"{names.get_name(base)}.{suffix}", tensor.numpy(), (qtypes or {}).get(name, Q.F32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _add_tensor(w: gguf.GGUFWriter, name: str, array: np.ndarray, qtype: Q) -> None:
    if qtype == Q.F32:
        w.add_tensor(name, array)
    elif qtype == Q.F16:
        w.add_tensor(name, array.astype(np.float16))
    else:
        w.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)


def random_state(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Every parameter random, norms included (a norm left at ones would hide a missed offset).
    Values on a 2^-10 grid so Gemma's stored 1 + w is exact in float32."""
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.round(torch.randn(p.shape, generator=generator) * 1024) / 1024
            for name, p in model.state_dict().items()}


# -- tiny models of every supported architecture --------------------------------

LLAMA = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 128,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "max_position_embeddings": 131072, "tie_word_embeddings": False, "attention_bias": False,
    "bos_token_id": 1, "eos_token_id": 2, "mlp_bias": False,
}
QWEN2 = {
    "model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "vocab_size": 64, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    "max_position_embeddings": 131072, "tie_word_embeddings": True, "attention_bias": True,
    "bos_token_id": 3, "eos_token_id": 4,
}
QWEN3 = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 64, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    "max_position_embeddings": 40960, "tie_word_embeddings": False, "attention_bias": False,
    "bos_token_id": 5, "eos_token_id": 6,
}
GEMMA3 = {
    "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 64, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 7, "num_attention_heads": 2, "num_key_value_heads": 1,
    "head_dim": 32, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": None,
    "max_position_embeddings": 2048, "tie_word_embeddings": True, "attention_bias": False,
    "bos_token_id": 2, "eos_token_id": 1, "sliding_window": 16,
    "layer_types": ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"],
    "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 32, "hidden_activation": "gelu_pytorch_tanh",
    "final_logit_softcapping": 30.0, "attn_logit_softcapping": None,
}
MODELS = {
    "llama": (LLAMA, transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "qwen2": (QWEN2, transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "qwen3": (QWEN3, transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
    "gemma3": (GEMMA3, transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
}


def hf_pieces(arch: str):
    cfg, config_cls, model_cls = MODELS[arch]
    structural = {k: v for k, v in cfg.items() if k not in ("rope_scaling", "architectures")}
    with torch.device("meta"):  # only the names and shapes are needed
        model = model_cls(config_cls(**structural))
    return cfg, config_cls, model_cls, random_state(model, seed=len(arch))


def write_kernel_gguf(path, arch: str, qtype_by_projection: dict[str, Q]) -> None:
    """A tiny `arch` GGUF whose projections (by Hugging Face name part: "q_proj", "lm_head", ...)
    are in the given block formats, weights scaled down so that int8 activations stay in range."""
    cfg, _, _, state = hf_pieces(arch)
    state = {name: tensor / 16 for name, tensor in state.items()}
    qtypes = {name: qtype for name in state for part, qtype in qtype_by_projection.items() if f"{part}." in name}
    write_gguf(path, arch, cfg, state, qtypes)
