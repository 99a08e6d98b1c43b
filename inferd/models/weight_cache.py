"""A disk cache of loaded weights.

Dequantizing a GGUF file (and re-quantizing it for the CPU kernels) takes
seconds and a transient gigabyte; mapping the result back takes milliseconds.
The cache lives under `$XDG_CACHE_HOME/inferd/weights` (default
~/.cache/inferd/weights), one safetensors file per model file and scheme,
named by a hash of the model's path and the scheme, and one of its size and
modification time, this format's version and the torch version (the int4
packing is torch's own layout); writing one removes the versions it replaces. Tensors shared in the model (a tied embedding and LM head) are
stored once and named as aliases in the file's metadata.

Every tensor starts on a page of the file (padding entries fill the gaps, so
it stays a valid safetensors file) and loads as a memory map of its own:
nothing is read or copied at load, pages come in as they are first used,
shared with the page cache, and a tensor dropped later (a plain weight once
packed for oneDNN) unmaps its pages with it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import mmap
import os
import struct
import uuid
from pathlib import Path

import torch
from torch import nn

from inferd.cache_files import directory_accepts_writes, user_cache_dir

log = logging.getLogger(__name__)

FORMAT_VERSION = 4  # 2: page-aligned tensors, memory-mapped at load; 3: Q6_K tiles a byte a weight; 4: tiles in pairs
DIGEST_LENGTH = 12
PAGE = mmap.ALLOCATIONGRANULARITY  # a map's offset in the file must be a multiple of this
_PADDING = "__padding__"  # entries that only fill the gap before a page-aligned tensor
_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "I8": torch.int8, "U8": torch.uint8,
           "I32": torch.int32, "I64": torch.int64}
_NAMES = {dtype: name for name, dtype in _DTYPES.items()}


def weight_cache_file(model_path: Path, label: str) -> Path:
    """Where the weights of `model_path` quantized as `label` are cached:
    `NAME.WHAT.VERSION.safetensors`, WHAT a digest of the model's path and the
    scheme, VERSION one of its files' sizes and times, this format and torch."""
    files = sorted(model_path.glob("*.safetensors")) if model_path.is_dir() else [model_path]
    what = _digest([str(model_path.resolve()), label])
    version = _digest([FORMAT_VERSION, torch.__version__, *((f.name, f.stat().st_size, f.stat().st_mtime_ns)
                                                             for f in files)])
    return user_cache_dir() / "weights" / f"{model_path.name}.{what}.{version}.safetensors"


def _digest(identity: list) -> str:
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:DIGEST_LENGTH]


def stale_versions(cache_file: Path) -> list[Path]:
    """Other cache files of the same model path and scheme (an older version of
    the model file, of this format or of torch), and those named the way older
    releases named them: none of them will be read again."""
    name, what, _, _ = cache_file.name.rsplit(".", 3)
    stale = []
    for other in cache_file.parent.glob(f"{glob.escape(name)}.*.safetensors"):
        digests = other.name[len(name) + 1:].split(".")[:-1]
        if other != cache_file and (digests[:1] == [what] or len(digests) == 1) and all(map(_is_digest, digests)):
            stale.append(other)
    return stale


def _is_digest(text: str) -> bool:
    return len(text) in (DIGEST_LENGTH, 16) and all(c in "0123456789abcdef" for c in text)


def load_cached_state(cache_file: Path) -> dict[str, torch.Tensor] | None:
    """The cached state dict, each tensor a memory map of the file (see
    `map_cached_tensor`), or None when there is no readable cache."""
    try:
        with open(cache_file, "rb") as f:
            header, aliases, data_start = _read_header(f)
            size = os.fstat(f.fileno()).st_size
            state = {name: _map(f, info, data_start, size) for name, info in header.items()
                     if not name.startswith(_PADDING)}
    except FileNotFoundError:
        return None
    except Exception as error:  # a damaged cache is rebuilt, never fatal
        log.warning("ignoring unreadable weight cache %s: %s", cache_file, error)
        return None
    for alias, name in aliases.items():
        state[alias] = state[name]
    return state


def map_cached_tensor(cache_file: Path, name: str) -> torch.Tensor | None:
    """One tensor of the cache as a private memory map, or None when the file
    does not hold it. Its pages load on first touch and count toward the
    process's memory only once touched: right for a lookup table read a row
    at a time (the token embedding)."""
    try:
        with open(cache_file, "rb") as f:
            header, aliases, data_start = _read_header(f)
            info = header.get(aliases.get(name, name))
            return None if info is None else _map(f, info, data_start, os.fstat(f.fileno()).st_size)
    except (OSError, ValueError) as error:
        log.warning("cannot map %s from weight cache %s: %s", name, cache_file, error)
        return None


def _map(f, info: dict, data_start: int, file_size: int) -> torch.Tensor:
    """A tensor over its own map of the file: copy-on-write (torch wants a
    writable buffer; weights are never written), unmapped when the tensor goes."""
    begin, end = info["data_offsets"]
    dtype, shape = _DTYPES[info["dtype"]], info["shape"]
    if data_start + end > file_size or end < begin:
        raise ValueError(f"tensor data past the end of the file ({data_start + end} > {file_size} bytes)")
    if end == begin:
        return torch.empty(shape, dtype=dtype)
    start = data_start + begin
    page_start = start - start % PAGE  # a cache from this version is aligned; this keeps any other mappable
    mapping = mmap.mmap(f.fileno(), data_start + end - page_start, access=mmap.ACCESS_COPY, offset=page_start)
    count = (end - begin) // dtype.itemsize
    return torch.frombuffer(mapping, dtype=dtype, count=count, offset=start - page_start).view(shape)


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
            tensors[name] = tensor.detach().contiguous()
    if not directory_accepts_writes(cache_file.parent):
        log.info("weight cache folder %s is not writable; quantizing on every load", cache_file.parent)
        return False
    temporary = cache_file.with_name(f"{cache_file.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        write_aligned(temporary, tensors, {"aliases": json.dumps(aliases)})
        os.replace(temporary, cache_file)
    except (OSError, ValueError) as error:
        temporary.unlink(missing_ok=True)
        log.info("cannot write weight cache %s (%s); quantizing on every load", cache_file, error)
        return False
    for stale in stale_versions(cache_file):  # a process still mapping one keeps its pages until it exits
        log.info("removing stale weight cache %s", stale)
        stale.unlink(missing_ok=True)
    return True


def write_aligned(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """A safetensors file whose tensors each start on a page of the file."""
    entries: dict[str, dict] = {}
    cursor = 0
    for name, tensor in tensors.items():
        gap = -cursor % PAGE
        if gap:
            entries[f"{_PADDING}{len(entries)}"] = {"dtype": "U8", "shape": [gap], "data_offsets": [cursor, cursor + gap]}
            cursor += gap
        if tensor.dtype not in _NAMES:
            raise ValueError(f"{name}: no cache format for {tensor.dtype}")
        nbytes = tensor.numel() * tensor.element_size()
        entries[name] = {"dtype": _NAMES[tensor.dtype], "shape": list(tensor.shape),
                         "data_offsets": [cursor, cursor + nbytes]}
        cursor += nbytes
    header = json.dumps({"__metadata__": metadata, **entries}, separators=(",", ":")).encode()
    header += b" " * (-(8 + len(header)) % PAGE)  # the data starts on a page too
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:  # the model's weights: owner only
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for name, info in entries.items():
            begin, end = info["data_offsets"]
            if name.startswith(_PADDING):
                f.write(bytes(end - begin))
            elif end > begin:
                f.write(tensors[name].reshape(-1).view(torch.uint8).numpy().data)
