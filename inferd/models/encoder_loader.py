"""Loading an encoder model (embeddings, or a cross-encoder that scores
pairs) from a Hugging Face folder: config, safetensors, tokenizer.json and the
sentence-transformers pooling config."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from inferd.arch.bert import BertEncoder, build_encoder
from inferd.models.encoder_config import EncoderConfig, ModelKind, model_kind
from inferd.models.encoder_tokenizer import EncoderTokenizer
from inferd.models.hf import count_safetensors, iter_safetensors, read_hf_config
from inferd.models.loader import resolve_dtype
from inferd.models.pooling_config import PoolingConfig, read_pooling_config
from inferd.models.progress import with_progress


@dataclass
class LoadedEncoder:
    name: str  # what clients call it
    path: str
    kind: ModelKind  # "embed" or "rerank"
    config: EncoderConfig
    model: BertEncoder
    tokenizer: EncoderTokenizer
    pooling: PoolingConfig
    dtype: torch.dtype
    device: torch.device
    load_seconds: float

    @property
    def max_tokens(self) -> int:
        """The longest input: the position table, or less where the model was trained shorter."""
        return min(self.config.max_tokens, self.pooling.max_tokens or self.config.max_tokens)


def encoder_dtype(name: str, device: torch.device) -> torch.dtype:
    """--embedding-dtype: `auto` is bfloat16 where the hardware computes it
    natively (CUDA; CPUs with AVX512-BF16 or AMX: 2-3x float32's throughput,
    cosine to float32 ~0.9999), else float32 (an AVX2 CPU only emulates bf16)."""
    if name != "auto":
        return resolve_dtype(name)
    if device.type == "cuda":
        return torch.bfloat16
    from inferd.kernels.isa import cpu_flags

    return torch.bfloat16 if cpu_flags() & {"avx512_bf16", "amx_bf16"} else torch.float32


def folder_kind(path: Path) -> ModelKind:
    """What a model path holds; a GGUF file or a decoder folder is a chat model."""
    if not path.is_dir():
        return "chat"
    return model_kind(read_hf_config(path))


def load_encoder(name: str, path: Path, dtype: torch.dtype, device: torch.device,
                 pooling: str | None = None) -> LoadedEncoder:
    """`pooling` overrides the folder's pooling mode (mean, cls, last, max, none)."""
    started = time.monotonic()
    hf = read_hf_config(path)
    config = EncoderConfig.from_hf(hf)
    net = build_encoder(config)
    tensors = with_progress(iter_safetensors(path), count_safetensors(path), f"loading {name}")
    net.load_weights(tensors, dtype, device)
    net.eval()
    return LoadedEncoder(name, str(path), model_kind(hf), config, net, EncoderTokenizer.from_folder(path),
                         read_pooling_config(path).with_mode(pooling), dtype, device, time.monotonic() - started)
