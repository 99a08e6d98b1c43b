"""Resolve a model argument, then load its config, weights and tokenizer."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from inferd.arch import build_model
from inferd.arch.base import CausalLM
from inferd.arch.file_blocks import FORMATS, blocks_label, use_file_blocks
from inferd.arch.quantize import pack_for_cpu, quantize_model, resolve_weights, uses_file_blocks, weights_label
from inferd.kernels import isa
from inferd.kernels import prepare as prepare_kernels
from inferd.models.config import ModelConfig
from inferd.models.paths import resolve_model_path
from inferd.models.process_memory import bound_process_memory, release_freed_memory
from inferd.models.progress import with_progress
from inferd.models.tokenizer import Tokenizer, load_tokenizer
from inferd.models.weight_cache import load_cached_state, map_cached_tensor, store_state, weight_cache_file


log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    name: str  # what clients call it (the "model" field)
    path: str
    config: ModelConfig
    model: CausalLM
    tokenizer: Tokenizer
    dtype: torch.dtype
    device: torch.device
    load_seconds: float


DTYPES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
          "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32}


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str = "auto", device: torch.device | None = None) -> torch.dtype:
    """`auto`: bf16 on CUDA and on CPUs that compute it natively (AVX512-BF16,
    AMX, Arm BF16: float32 is 3-4x slower there), float32 on the others, where
    bf16 matmuls are only emulated (an AVX2 CPU: prefill runs float32 GEMMs)."""
    if dtype == "auto":
        if device is not None and device.type != "cpu":
            return torch.bfloat16
        if isa.native_bf16():
            log.info("--dtype auto: bfloat16, which this CPU computes natively")
            return torch.bfloat16
        why = (f"INFERD_ISA={isa.selected()} stands for CPUs without native bf16" if isa.cpu_flags() & isa.NATIVE_BF16_FLAGS
               else "this CPU has no native bf16 (AVX512-BF16, AMX or Arm BF16)")
        log.info("--dtype auto: float32, since %s: bf16 matmuls would only be emulated", why)
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not one of: auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


def load_model(model: str | None = None, dtype: str = "auto", device: str = "auto", weights: str = "auto",
               data_dir: str | None = None) -> LoadedModel:
    """`model`: a path, a stored model's name (in `data_dir`'s store), or None for the bundled one."""
    started = time.monotonic()
    bound_process_memory()
    name, path = resolve_model_path(model, data_dir)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    quantization = resolve_weights(weights, torch_dtype, torch_device)
    file_blocks = uses_file_blocks(weights, path, torch_dtype, torch_device)
    config = ModelConfig.from_hf(_read_config(path))
    net = build_model(config)
    # Cached: dequantizing a GGUF, and quantizing; safetensors in the engine dtype load fast as they are.
    cached = torch_device.type == "cpu" and (path.is_file() or quantization is not None)
    label = blocks_label(torch_dtype) if file_blocks else weights_label(quantization, torch_dtype)
    cache_file = weight_cache_file(path, label) if cached else None
    block_formats = _block_formats(path) if file_blocks else None
    # Mapped, not read: pages come in as used, and most of the embedding never is (see map_embedding).
    state = None if cache_file is None else load_cached_state(cache_file)
    if state is not None:
        if quantization is not None:
            quantize_model(net, quantization, torch_dtype, empty=True)
        if block_formats is not None:
            use_file_blocks(net, block_formats, None, torch_dtype)
        try:
            net.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as error:  # written for another layout of the model: rebuilt, never fatal
            log.warning("ignoring weight cache %s, which does not fit the model: %s", cache_file, error)
            net = build_model(config)
            state = None
    if state is not None:
        del state  # the model holds the tensors now; packing below can free each plain weight
    else:
        tensors, total = _tensors(path, torch_dtype)
        net.load_weights(with_progress(tensors, total, f"loading {name}"), torch_dtype, torch_device)
        if quantization is not None:
            quantize_model(net, quantization, torch_dtype)
        if block_formats is not None:
            use_file_blocks(net, block_formats, _block_bytes(path), torch_dtype)
        if cache_file is not None and not store_state(cache_file, net):
            cache_file = None
    # The reorder for oneDNN holds no GIL, the tokenizer's load holds it throughout: side by side they overlap.
    with ThreadPoolExecutor(1, thread_name_prefix="inferd-pack") as packer:
        packing = packer.submit(pack_for_cpu, net, torch_dtype, torch_device)
        tokenizer = load_tokenizer(path)
        packing.result()
    if torch_device.type == "cpu":
        prepare_kernels()
    if cache_file is not None:
        map_embedding(net, cache_file)
    release_freed_memory()
    net.eval()
    return LoadedModel(name, str(path), config, net, tokenizer, torch_dtype, torch_device, time.monotonic() - started)


def _read_config(path: Path) -> dict:
    if path.is_file():
        from inferd.models.gguf import read_gguf_config

        return read_gguf_config(path)
    from inferd.models.hf import read_hf_config

    return read_hf_config(path)


def _block_formats(path: Path) -> dict[str, tuple[str, int]]:
    from inferd.models.gguf import gguf_block_formats

    return gguf_block_formats(path, FORMATS)


def _block_bytes(path: Path) -> dict[str, torch.Tensor]:
    from inferd.models.gguf import iter_gguf_blocks

    return {name: raw for name, _, raw in iter_gguf_blocks(path, FORMATS)}


def _tensors(path: Path, dtype: torch.dtype) -> tuple[Iterator[tuple[str, torch.Tensor]], int]:
    """(Hugging Face name, tensor) pairs and how many there are."""
    if path.is_file():
        from inferd.models.gguf import iter_gguf_tensors
        from inferd.models.gguf_file import GGUFFile

        return iter_gguf_tensors(path, dtype=dtype), len(GGUFFile(path).tensors)
    from inferd.models.hf import count_safetensors, iter_safetensors

    return iter_safetensors(path), count_safetensors(path)


def map_embedding(net: CausalLM, cache_file: Path) -> None:
    """Serve token lookups from the weight cache's memory map when nothing
    else uses the embedding (an untied model, or a tied one whose head is a
    packed copy): only the rows of tokens seen get loaded, instead of the
    whole table (335 MB for the bundled model). A warm load's embedding is
    mapped already; a fresh map still drops the pages packing the head read."""
    weight = net.embed_tokens.weight
    others = (t for name, t in net.state_dict(keep_vars=True).items() if name != "embed_tokens.weight")
    if net.lm_head is None and net.fast_head is None or any(t.data_ptr() == weight.data_ptr() for t in others):
        return
    mapped = map_cached_tensor(cache_file, "embed_tokens.weight")
    if mapped is not None and mapped.shape == weight.shape and mapped.dtype == weight.dtype:
        net.embed_tokens.weight = torch.nn.Parameter(mapped, requires_grad=False)
