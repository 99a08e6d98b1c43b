"""A disk cache of loaded weights.

Dequantizing a GGUF file (and re-quantizing it for the CPU kernels) takes
seconds and a transient gigabyte; reading the result back takes a fraction of
a second. The cache lives under `$XDG_CACHE_HOME/inferd/weights` (default
~/.cache/inferd/weights), one safetensors file per model file and scheme,
named by a hash of the model's path, size and modification time, the scheme,
this format's version and the torch version (the int4 packing is torch's own
layout). Tensors shared in the model (a tied embedding and LM head) are
stored once and named as aliases in the file's metadata.
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import struct
import uuid
from collections.abc import Collection
from pathlib import Path

import safetensors.torch
import torch
from torch import nn

from inferd.models.tokenizer_cache import directory_accepts_writes, user_cache_dir

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I8": torch.int8, "U8": torch.uint8,
           "I32": torch.int32, "I64": torch.int64}


def weight_cache_file(model_path: Path, label: str) -> Path:
    """Where the weights of `model_path` quantized as `label` are cached."""
    files = sorted(model_path.glob("*.safetensors")) if model_path.is_dir() else [model_path]
    identity = [str(model_path.resolve()), label, FORMAT_VERSION, torch.__version__]
    identity += [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]
    return user_cache_dir() / "weights" / f"{model_path.name}.{digest}.safetensors"


def load_cached_state(cache_file: Path, mapped: Collection[str] = ()) -> dict[str, torch.Tensor] | None:
    """The cached state dict, or None when there is no readable one. The
    tensors named in `mapped` come as memory maps (see `map_cached_tensor`)
    instead of being read: a lookup table need not be read whole to start."""
    try:
        state, aliases = _read_safetensors(cache_file, skip=set(mapped))
        for name in mapped:
            tensor = map_cached_tensor(cache_file, name)  # None when the file lacks it
            if tensor is not None:
                state[name] = tensor
    except FileNotFoundError:
        return None
    except Exception as error:  # a damaged cache is rebuilt, never fatal
        log.warning("ignoring unreadable weight cache %s: %s", cache_file, error)
        return None
    for alias, name in aliases.items():
        state[alias] = state[name]
    return state


def map_cached_tensor(cache_file: Path, name: str) -> torch.Tensor | None:
    """One tensor of the cache as a private, read-only-in-use memory map, or
    None when the file does not hold it. Its pages load on first touch and
    count toward the process's memory only once touched: right for a lookup
    table read a row at a time (the token embedding)."""
    try:
        with open(cache_file, "rb") as f:
            header, aliases, data_start = _read_header(f)
            info = header.get(aliases.get(name, name))
            if info is None:
                return None
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writable for torch; never written
    except (OSError, ValueError) as error:
        log.warning("cannot map %s from weight cache %s: %s", name, cache_file, error)
        return None
    begin, end = info["data_offsets"]
    dtype = _DTYPES[info["dtype"]]
    flat = torch.frombuffer(mapping, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=data_start + begin)
    return flat.view(info["shape"])


def _read_safetensors(path: Path, skip: set[str]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read each tensor but those in `skip` straight into its own allocation.

    Not through a memory map: mapped tensors sit at 8-byte offsets (the int8
    kernel faults on weights that are not 64-byte aligned), and copying them
    out would hold the mapping and the copies at once, doubling peak memory.
    """
    with open(path, "rb") as f:
        header, aliases, data_start = _read_header(f)
        state = {}
        for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
            if name in skip:
                continue
            begin, end = info["data_offsets"]
            tensor = torch.empty(info["shape"], dtype=_DTYPES[info["dtype"]])
            view = tensor.view(-1).view(torch.uint8).numpy() if tensor.numel() else memoryview(b"")
            f.seek(data_start + begin)
            if f.readinto(view) != end - begin:
                raise ValueError(f"{name}: truncated")
            state[name] = tensor
    return state, aliases


def _read_header(f) -> tuple[dict, dict[str, str], int]:
    """A safetensors file's tensor entries, its aliases (ours, in the metadata)
    and where the tensor data starts."""
    (header_len,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(header_len))
    aliases = json.loads(header.pop("__metadata__", {}).get("aliases", "{}"))
    return header, aliases, 8 + header_len


def store_state(cache_file: Path, model: nn.Module) -> bool:
    """Save `model`'s state dict; False (and a log line) when it cannot be written."""
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first_name: dict[tuple[int, tuple[int, ...]], str] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in first_name:
            aliases[name] = first_name[key]
        else:
            first_name[key] = name
            tensors[name] = tensor.contiguous()
    if not directory_accepts_writes(cache_file.parent):
        log.info("weight cache folder %s is not writable; quantizing on every load", cache_file.parent)
        return False
    temporary = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        safetensors.torch.save_file(tensors, str(temporary), metadata={"aliases": json.dumps(aliases)})
        os.replace(temporary, cache_file)
        return True
    except OSError as error:
        temporary.unlink(missing_ok=True)
        log.info("cannot write weight cache %s (%s); quantizing on every load", cache_file, error)
        return False
